COPY t (v) FROM STDIN (ON_ERROR ignore)
