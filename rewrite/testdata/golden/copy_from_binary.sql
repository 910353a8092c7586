COPY t (v) FROM STDIN (FORMAT binary)
