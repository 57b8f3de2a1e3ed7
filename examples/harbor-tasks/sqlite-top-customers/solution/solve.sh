#!/bin/bash
cat > /app/top.sql <<'SQL'
SELECT c.name || '|' || SUM(o.amount_cents) AS line
FROM customers c JOIN orders o ON o.customer_id = c.id
GROUP BY c.id
ORDER BY SUM(o.amount_cents) DESC
LIMIT 3;
SQL
