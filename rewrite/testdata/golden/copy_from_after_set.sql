SET search_path = s; COPY t (v) FROM STDIN
