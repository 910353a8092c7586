COPY t (v) FROM '/tmp/x'
