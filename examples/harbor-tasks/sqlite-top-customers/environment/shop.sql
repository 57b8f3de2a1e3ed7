CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, amount_cents INTEGER NOT NULL);
INSERT INTO customers VALUES (1, 'ada'), (2, 'brian'), (3, 'chen'), (4, 'dana'), (5, 'emeka');
INSERT INTO orders (customer_id, amount_cents) VALUES
  (1, 1200), (1, 800), (2, 5000), (3, 700), (3, 700), (3, 700),
  (4, 4100), (5, 300), (5, 250), (2, 10), (4, 1);
