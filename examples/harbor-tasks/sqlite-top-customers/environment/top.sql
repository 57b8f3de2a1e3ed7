-- TODO: the three biggest spenders, as name|total_cents
SELECT name FROM customers LIMIT 3;
