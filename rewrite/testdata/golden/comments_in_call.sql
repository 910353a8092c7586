SELECT snowflake . nextval ( /* c */ 's' -- x
 ) AS id
