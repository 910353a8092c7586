insert into db.s.t (x) values (1)
