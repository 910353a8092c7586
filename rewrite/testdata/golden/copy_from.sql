COPY t (payload) FROM STDIN
