-- snowflake-proxy shim: PostgreSQL's checks of an extension version name
-- (check_valid_version_name), pasted into the DO blocks of install.sql and
-- update.sql, on their variable v_version.
IF pg_catalog.strpos(v_version, '--') > 0 THEN
    RAISE EXCEPTION 'invalid extension version name: "%"', v_version
        USING ERRCODE = 'invalid_parameter_value', DETAIL = 'Version names must not contain "--".';
END IF;
IF pg_catalog.left(v_version, 1) = '-' OR pg_catalog.right(v_version, 1) = '-' THEN
    RAISE EXCEPTION 'invalid extension version name: "%"', v_version
        USING ERRCODE = 'invalid_parameter_value', DETAIL = 'Version names must not begin or end with "-".';
END IF;
IF pg_catalog.strpos(v_version, '/') > 0 THEN
    RAISE EXCEPTION 'invalid extension version name: "%"', v_version
        USING ERRCODE = 'invalid_parameter_value', DETAIL = 'Version names must not contain directory separator characters.';
END IF;
