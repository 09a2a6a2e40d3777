-- The loopwise example shop: customers, orders, payments, shipments and their events.
-- Hand-written; failures worth investigating are in here on purpose:
--   C-1004 Dana Whitfield   last three orders failed, each for a different reason
--                           (declined card, undeliverable address, out-of-stock cancellation)
--   C-1005 Tomás Herrera    parcel lost by the carrier, charged and not yet refunded
--   C-1007 Jonas Eriksson   expired card, then a successful retry with a new card
--   C-1008 Fatima El Idrissi address missing a postcode, returned, re-sent and delivered
--   C-1009 Grace Mbeki      parcel lost by the carrier, refunded
--   C-1010 Oliver Grant     out-of-stock cancellation; a later order still in transit
--   C-1012 Hiro Tanaka      card declined three times (CVC twice, then expired), then paid
-- Amounts are in cents. Times are UTC, ISO-8601.

CREATE TABLE customers (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    email       TEXT NOT NULL UNIQUE,
    plan        TEXT NOT NULL CHECK (plan IN ('free', 'plus', 'business')),
    country     TEXT NOT NULL,
    since       TEXT NOT NULL
);

CREATE TABLE orders (
    id          TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    placed_at   TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('delivered', 'in_transit', 'payment_failed',
                    'cancelled', 'returned_to_sender', 'lost', 'refunded')),
    total_cents INTEGER NOT NULL,
    currency    TEXT NOT NULL,
    items       TEXT NOT NULL,
    ship_to     TEXT NOT NULL,
    note        TEXT
);

CREATE TABLE payments (
    id           TEXT PRIMARY KEY,
    order_id     TEXT NOT NULL REFERENCES orders(id),
    attempted_at TEXT NOT NULL,
    method       TEXT NOT NULL CHECK (method IN ('card', 'paypal', 'bank_transfer')),
    card_last4   TEXT,
    amount_cents INTEGER NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('captured', 'declined', 'authorized',
                     'voided', 'refunded')),
    decline_code TEXT
);

CREATE TABLE shipments (
    id          TEXT PRIMARY KEY,
    order_id    TEXT NOT NULL REFERENCES orders(id),
    carrier     TEXT NOT NULL,
    tracking    TEXT NOT NULL
);

CREATE TABLE shipment_events (
    shipment_id TEXT NOT NULL REFERENCES shipments(id),
    at          TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('label_created', 'picked_up', 'in_transit',
                    'out_for_delivery', 'delivered', 'exception', 'returned_to_sender', 'lost')),
    location    TEXT NOT NULL,
    detail      TEXT NOT NULL
);

CREATE INDEX orders_by_customer ON orders(customer_id, placed_at);
CREATE INDEX payments_by_order ON payments(order_id);
CREATE INDEX shipments_by_order ON shipments(order_id);
CREATE INDEX events_by_shipment ON shipment_events(shipment_id, at);

INSERT INTO customers VALUES
 ('C-1001', 'Amara Okafor',        'amara.okafor@example.com',    'plus',     'GB', '2022-03-14'),
 ('C-1002', 'Lukas Brandt',        'lukas.brandt@example.de',     'free',     'DE', '2023-01-09'),
 ('C-1003', 'Priya Raman',         'priya@raman-design.example',  'business', 'IN', '2021-11-30'),
 ('C-1004', 'Dana Whitfield',      'dana.whitfield@example.com',  'plus',     'US', '2022-07-21'),
 ('C-1005', 'Tomás Herrera',       'tomas.herrera@example.es',    'free',     'ES', '2023-05-02'),
 ('C-1006', 'Mei Chen',            'mei.chen@example.com',        'business', 'SG', '2020-09-17'),
 ('C-1007', 'Jonas Eriksson',      'jonas.eriksson@example.se',   'free',     'SE', '2024-02-11'),
 ('C-1008', 'Fatima El Idrissi',   'fatima.elidrissi@example.fr', 'plus',     'FR', '2023-08-25'),
 ('C-1009', 'Grace Mbeki',         'grace.mbeki@example.co.za',   'plus',     'ZA', '2022-12-05'),
 ('C-1010', 'Oliver Grant',        'oliver.grant@example.com',    'free',     'US', '2024-04-30'),
 ('C-1011', 'Sofia Rossi',         'sofia.rossi@studio.example',  'business', 'IT', '2021-06-08'),
 ('C-1012', 'Hiro Tanaka',         'hiro.tanaka@example.jp',      'free',     'JP', '2024-06-19');

INSERT INTO orders VALUES
 ('O-1001', 'C-1001', '2024-06-03T10:12:00Z', 'delivered',          4598, 'GBP', '2x Linen tea towel; 1x Stoneware mug',           '12 Marlowe Rd, London E17 4QT, GB', NULL),
 ('O-1002', 'C-1002', '2024-06-11T08:40:00Z', 'delivered',          2999, 'EUR', '1x Pour-over kettle stand',                      'Schillerstr. 8, 10625 Berlin, DE', NULL),
 ('O-1003', 'C-1003', '2024-06-20T14:05:00Z', 'delivered',         18900, 'INR', '3x Desk lamp LX-3',                              '4th Floor, 22 MG Road, Bengaluru 560001, IN', NULL),
 ('O-1004', 'C-1006', '2024-07-01T02:30:00Z', 'delivered',         12450, 'SGD', '5x Stoneware mug; 2x Bamboo tray',               '18 Cross St #09-01, Singapore 048423, SG', NULL),
 ('O-1005', 'C-1011', '2024-07-09T09:15:00Z', 'delivered',         32000, 'EUR', '4x Ergonomic chair cushion',                     'Via Tortona 27, 20144 Milano, IT', NULL),
 ('O-1006', 'C-1001', '2024-07-18T17:22:00Z', 'delivered',         1899, 'GBP', '1x Beeswax candle set',                           '12 Marlowe Rd, London E17 4QT, GB', NULL),
 ('O-1010', 'C-1004', '2024-08-02T19:45:00Z', 'delivered',         5400, 'USD', '1x Cast-iron skillet 10in',                       '418 Larkspur Ln, Portland OR 97214, US', NULL),
 ('O-1012', 'C-1005', '2024-08-14T11:00:00Z', 'delivered',         3650, 'EUR', '1x Ceramic pour-over dripper; 1x Filters (100)',  'Calle de Toledo 45, 3B, 28005 Madrid, ES', NULL),
 ('O-1014', 'C-1006', '2024-08-29T03:10:00Z', 'delivered',         8900, 'SGD', '1x Walnut serving board',                         '18 Cross St #09-01, Singapore 048423, SG', NULL),
 ('O-1015', 'C-1007', '2024-09-06T16:30:00Z', 'payment_failed',     7900, 'SEK', '1x Wool throw, grey',                            'Götgatan 14, 118 46 Stockholm, SE', 'payment not completed: card expired'),
 ('O-1016', 'C-1007', '2024-09-06T16:52:00Z', 'delivered',          7900, 'SEK', '1x Wool throw, grey',                            'Götgatan 14, 118 46 Stockholm, SE', 'reorder of O-1015 with a new card'),
 ('O-1017', 'C-1004', '2024-10-05T21:03:00Z', 'payment_failed',    12900, 'USD', '1x Espresso grinder EG-2',                        '418 Larkspur Ln Apt 12B, Portland OR 97214, US', 'payment not completed after 2 attempts'),
 ('O-1018', 'C-1002', '2024-10-07T07:55:00Z', 'delivered',          1450, 'EUR', '1x Filters (100)',                                'Schillerstr. 8, 10625 Berlin, DE', NULL),
 ('O-1019', 'C-1009', '2024-10-09T13:20:00Z', 'refunded',           6400, 'ZAR', '2x Linen napkin set',                             '7 Kloof St, Gardens, Cape Town 8001, ZA', 'refunded after carrier declared the parcel lost'),
 ('O-1020', 'C-1008', '2024-10-12T10:05:00Z', 'returned_to_sender', 5200, 'EUR', '1x Stoneware teapot',                             '9 rue des Lilas, Lyon, FR', 'address had no postcode'),
 ('O-1021', 'C-1003', '2024-10-15T05:40:00Z', 'delivered',          9900, 'INR', '1x Desk organiser',                               '4th Floor, 22 MG Road, Bengaluru 560001, IN', NULL),
 ('O-1022', 'C-1010', '2024-10-18T22:14:00Z', 'cancelled',          4999, 'USD', '1x Kettle KX-200',                                '55 Grove St, Brooklyn NY 11211, US', 'cancelled: item out of stock'),
 ('O-1023', 'C-1004', '2024-10-19T18:27:00Z', 'returned_to_sender', 8600, 'USD', '2x Stoneware mug; 1x Bamboo tray',                '418 Larkspur Ln Apt 12B, Portland OR 97214, US', 'carrier could not deliver: address not found'),
 ('O-1024', 'C-1005', '2024-10-22T09:48:00Z', 'lost',               8450, 'EUR', '1x Cast-iron Dutch oven',                         'Calle de Toledo 45, 3B, 28005 Madrid, ES', 'carrier declared the parcel lost'),
 ('O-1025', 'C-1011', '2024-10-25T08:00:00Z', 'delivered',         14500, 'EUR', '10x Stoneware mug (studio order)',                'Via Tortona 27, 20144 Milano, IT', NULL),
 ('O-1026', 'C-1012', '2024-10-28T12:12:00Z', 'payment_failed',     5600, 'JPY', '1x Ceramic pour-over dripper',                    '2-14-3 Nakameguro, Meguro-ku, Tokyo 153-0061, JP', 'payment not completed after 2 attempts'),
 ('O-1027', 'C-1008', '2024-10-30T15:35:00Z', 'delivered',          5200, 'EUR', '1x Stoneware teapot',                             '9 rue des Lilas, 69003 Lyon, FR', 're-sent O-1020 with the postcode added'),
 ('O-1028', 'C-1009', '2024-11-01T06:50:00Z', 'delivered',          6400, 'ZAR', '2x Linen napkin set',                             '7 Kloof St, Gardens, Cape Town 8001, ZA', 'replacement for O-1019'),
 ('O-1029', 'C-1010', '2024-11-04T20:30:00Z', 'in_transit',         3899, 'USD', '1x Pour-over kettle stand',                       '55 Grove St, Brooklyn NY 11211, US', NULL),
 ('O-1030', 'C-1001', '2024-11-06T12:00:00Z', 'delivered',          2450, 'GBP', '1x Walnut coaster set',                           '12 Marlowe Rd, London E17 4QT, GB', NULL),
 ('O-1031', 'C-1004', '2024-11-08T16:41:00Z', 'cancelled',          4999, 'USD', '1x Kettle KX-200',                                '418 Larkspur Ln, Portland OR 97214, US', 'cancelled: item out of stock (Kettle KX-200 backordered)'),
 ('O-1033', 'C-1012', '2024-11-10T03:25:00Z', 'payment_failed',     5600, 'JPY', '1x Ceramic pour-over dripper',                    '2-14-3 Nakameguro, Meguro-ku, Tokyo 153-0061, JP', 'payment not completed: card expired'),
 ('O-1034', 'C-1006', '2024-11-12T01:05:00Z', 'in_transit',         5600, 'SGD', '2x Beeswax candle set',                           '18 Cross St #09-01, Singapore 048423, SG', NULL),
 ('O-1035', 'C-1012', '2024-11-12T04:40:00Z', 'delivered',          5600, 'JPY', '1x Ceramic pour-over dripper',                    '2-14-3 Nakameguro, Meguro-ku, Tokyo 153-0061, JP', 'paid with PayPal'),
 ('O-1036', 'C-1002', '2024-11-14T18:18:00Z', 'delivered',          3299, 'EUR', '1x Linen apron',                                  'Schillerstr. 8, 10625 Berlin, DE', NULL);

INSERT INTO payments VALUES
 ('P-2001', 'O-1001', '2024-06-03T10:12:30Z', 'card',   '1881',  4598, 'captured', NULL),
 ('P-2002', 'O-1002', '2024-06-11T08:40:20Z', 'paypal', NULL,    2999, 'captured', NULL),
 ('P-2003', 'O-1003', '2024-06-20T14:05:40Z', 'bank_transfer', NULL, 18900, 'captured', NULL),
 ('P-2004', 'O-1004', '2024-07-01T02:30:15Z', 'card',   '5100', 12450, 'captured', NULL),
 ('P-2005', 'O-1005', '2024-07-09T09:15:10Z', 'card',   '0044', 32000, 'captured', NULL),
 ('P-2006', 'O-1006', '2024-07-18T17:22:31Z', 'card',   '1881',  1899, 'captured', NULL),
 ('P-2010', 'O-1010', '2024-08-02T19:45:22Z', 'card',   '4242',  5400, 'captured', NULL),
 ('P-2012', 'O-1012', '2024-08-14T11:00:19Z', 'card',   '7310',  3650, 'captured', NULL),
 ('P-2014', 'O-1014', '2024-08-29T03:10:44Z', 'card',   '5100',  8900, 'captured', NULL),
 ('P-2015', 'O-1015', '2024-09-06T16:30:18Z', 'card',   '9034',  7900, 'declined', 'expired_card'),
 ('P-2016', 'O-1016', '2024-09-06T16:52:40Z', 'card',   '6621',  7900, 'captured', NULL),
 ('P-2021', 'O-1017', '2024-10-05T21:03:25Z', 'card',   '4242', 12900, 'declined', 'insufficient_funds'),
 ('P-2022', 'O-1017', '2024-10-05T21:09:02Z', 'card',   '4242', 12900, 'declined', 'do_not_honor'),
 ('P-2023', 'O-1018', '2024-10-07T07:55:11Z', 'paypal', NULL,    1450, 'captured', NULL),
 ('P-2024', 'O-1019', '2024-10-09T13:20:36Z', 'card',   '3387',  6400, 'captured', NULL),
 ('P-2025', 'O-1019', '2024-10-31T10:00:00Z', 'card',   '3387',  6400, 'refunded', NULL),
 ('P-2026', 'O-1020', '2024-10-12T10:05:27Z', 'card',   '7702',  5200, 'captured', NULL),
 ('P-2027', 'O-1021', '2024-10-15T05:40:33Z', 'bank_transfer', NULL, 9900, 'captured', NULL),
 ('P-2028', 'O-1022', '2024-10-18T22:14:50Z', 'card',   '1290',  4999, 'voided',   NULL),
 ('P-2029', 'O-1023', '2024-10-19T18:27:41Z', 'card',   '8816',  8600, 'captured', NULL),
 ('P-2030', 'O-1023', '2024-11-05T14:30:00Z', 'card',   '8816',  8600, 'refunded', NULL),
 ('P-2031', 'O-1024', '2024-10-22T09:48:29Z', 'card',   '7310',  8450, 'captured', NULL),
 ('P-2032', 'O-1025', '2024-10-25T08:00:37Z', 'card',   '0044', 14500, 'captured', NULL),
 ('P-2033', 'O-1026', '2024-10-28T12:12:21Z', 'card',   '5581',  5600, 'declined', 'incorrect_cvc'),
 ('P-2034', 'O-1026', '2024-10-28T12:14:02Z', 'card',   '5581',  5600, 'declined', 'incorrect_cvc'),
 ('P-2035', 'O-1027', '2024-10-30T15:35:12Z', 'card',   '7702',  5200, 'captured', NULL),
 ('P-2036', 'O-1028', '2024-11-01T06:50:28Z', 'card',   '3387',  6400, 'captured', NULL),
 ('P-2037', 'O-1029', '2024-11-04T20:30:16Z', 'card',   '1290',  3899, 'captured', NULL),
 ('P-2038', 'O-1031', '2024-11-08T16:41:19Z', 'card',   '8816',  4999, 'authorized', NULL),
 ('P-2039', 'O-1031', '2024-11-09T09:02:00Z', 'card',   '8816',  4999, 'voided',   NULL),
 ('P-2040', 'O-1030', '2024-11-06T12:00:25Z', 'card',   '1881',  2450, 'captured', NULL),
 ('P-2041', 'O-1033', '2024-11-10T03:25:30Z', 'card',   '5581',  5600, 'declined', 'expired_card'),
 ('P-2042', 'O-1034', '2024-11-12T01:05:22Z', 'card',   '5100',  5600, 'captured', NULL),
 ('P-2043', 'O-1035', '2024-11-12T04:40:41Z', 'paypal', NULL,    5600, 'captured', NULL),
 ('P-2044', 'O-1036', '2024-11-14T18:18:09Z', 'paypal', NULL,    3299, 'captured', NULL);

INSERT INTO shipments VALUES
 ('S-3001', 'O-1001', 'Royal Mail', 'RM204417735GB'),
 ('S-3002', 'O-1002', 'DHL',        'JD014600003911112201'),
 ('S-3003', 'O-1003', 'Blue Dart',  '69012345678'),
 ('S-3004', 'O-1004', 'SingPost',   'RR100200300SG'),
 ('S-3005', 'O-1005', 'BRT',        '084012345678901'),
 ('S-3006', 'O-1006', 'Royal Mail', 'RM209921003GB'),
 ('S-3010', 'O-1010', 'UPS',        '1Z999AA10123456784'),
 ('S-3012', 'O-1012', 'Correos',    'PQ4F5A0712345670'),
 ('S-3014', 'O-1014', 'SingPost',   'RR100200455SG'),
 ('S-3016', 'O-1016', 'PostNord',   'UA512306684SE'),
 ('S-3018', 'O-1018', 'DHL',        'JD014600003915550918'),
 ('S-3019', 'O-1019', 'FedEx',      '771234567890'),
 ('S-3020', 'O-1020', 'Colissimo',  '6A19834562201'),
 ('S-3021', 'O-1021', 'Blue Dart',  '69012399001'),
 ('S-3022', 'O-1023', 'UPS',        '1Z999AA10123459921'),
 ('S-3024', 'O-1024', 'DHL',        'JD014600003918471203'),
 ('S-3025', 'O-1025', 'BRT',        '084012345699902'),
 ('S-3027', 'O-1027', 'Colissimo',  '6A19834577730'),
 ('S-3028', 'O-1028', 'FedEx',      '771234599012'),
 ('S-3029', 'O-1029', 'USPS',       '9400111899223344556677'),
 ('S-3030', 'O-1030', 'Royal Mail', 'RM211873450GB'),
 ('S-3034', 'O-1034', 'SingPost',   'RR123456785SG'),
 ('S-3035', 'O-1035', 'Japan Post', 'EJ123456789JP'),
 ('S-3036', 'O-1036', 'DHL',        'JD014600003920001436');

INSERT INTO shipment_events VALUES
 ('S-3001', '2024-06-04T09:00:00Z', 'label_created',    'London, GB',       'Label created'),
 ('S-3001', '2024-06-04T16:20:00Z', 'picked_up',        'London, GB',       'Collected from warehouse'),
 ('S-3001', '2024-06-05T11:42:00Z', 'delivered',        'London E17, GB',   'Delivered to front door'),
 ('S-3002', '2024-06-12T09:30:00Z', 'picked_up',        'Hamburg, DE',      'Shipment picked up'),
 ('S-3002', '2024-06-13T14:02:00Z', 'delivered',        'Berlin, DE',       'Delivered to neighbour (Schillerstr. 10)'),
 ('S-3003', '2024-06-21T10:00:00Z', 'picked_up',        'Mumbai, IN',       'Shipment picked up'),
 ('S-3003', '2024-06-24T12:15:00Z', 'delivered',        'Bengaluru, IN',    'Delivered, received at reception'),
 ('S-3004', '2024-07-01T09:00:00Z', 'picked_up',        'Singapore, SG',    'Item posted'),
 ('S-3004', '2024-07-02T15:40:00Z', 'delivered',        'Singapore, SG',    'Delivered'),
 ('S-3005', '2024-07-10T08:20:00Z', 'picked_up',        'Bologna, IT',      'Ritirata'),
 ('S-3005', '2024-07-11T11:05:00Z', 'delivered',        'Milano, IT',       'Consegnata'),
 ('S-3006', '2024-07-19T10:00:00Z', 'picked_up',        'London, GB',       'Collected from warehouse'),
 ('S-3006', '2024-07-20T13:05:00Z', 'delivered',        'London E17, GB',   'Delivered, signed by OKAFOR'),
 ('S-3010', '2024-08-03T08:30:00Z', 'picked_up',        'Reno NV, US',      'Origin scan'),
 ('S-3010', '2024-08-05T17:10:00Z', 'delivered',        'Portland OR, US',  'Delivered, left at front porch'),
 ('S-3012', '2024-08-15T09:10:00Z', 'picked_up',        'Zaragoza, ES',     'Admitido'),
 ('S-3012', '2024-08-16T12:40:00Z', 'delivered',        'Madrid, ES',       'Entregado'),
 ('S-3014', '2024-08-29T09:00:00Z', 'picked_up',        'Singapore, SG',    'Item posted'),
 ('S-3014', '2024-08-30T16:10:00Z', 'delivered',        'Singapore, SG',    'Delivered'),
 ('S-3016', '2024-09-07T07:15:00Z', 'picked_up',        'Malmö, SE',        'Collected'),
 ('S-3016', '2024-09-09T14:30:00Z', 'delivered',        'Stockholm, SE',    'Delivered to parcel locker'),
 ('S-3018', '2024-10-08T08:00:00Z', 'picked_up',        'Hamburg, DE',      'Shipment picked up'),
 ('S-3018', '2024-10-09T10:45:00Z', 'delivered',        'Berlin, DE',       'Delivered to mailbox'),
 ('S-3019', '2024-10-10T08:00:00Z', 'picked_up',        'Johannesburg, ZA', 'Picked up'),
 ('S-3019', '2024-10-11T03:22:00Z', 'in_transit',       'Johannesburg, ZA', 'Departed FedEx hub'),
 ('S-3019', '2024-10-25T09:00:00Z', 'exception',        'Cape Town, ZA',    'No scan for 14 days; trace opened'),
 ('S-3019', '2024-10-30T12:00:00Z', 'lost',             'Cape Town, ZA',    'Carrier declared the package lost'),
 ('S-3020', '2024-10-13T08:45:00Z', 'picked_up',        'Paris, FR',        'Pris en charge'),
 ('S-3020', '2024-10-15T10:30:00Z', 'exception',        'Lyon, FR',         'Address incomplete: postcode missing'),
 ('S-3020', '2024-10-22T16:00:00Z', 'returned_to_sender', 'Paris, FR',      'Returned to sender: undeliverable as addressed'),
 ('S-3021', '2024-10-16T09:00:00Z', 'picked_up',        'Mumbai, IN',       'Shipment picked up'),
 ('S-3021', '2024-10-18T13:30:00Z', 'delivered',        'Bengaluru, IN',    'Delivered, received at reception'),
 ('S-3022', '2024-10-21T07:50:00Z', 'label_created',    'Reno NV, US',      'Label created'),
 ('S-3022', '2024-10-21T18:05:00Z', 'picked_up',        'Reno NV, US',      'Origin scan'),
 ('S-3022', '2024-10-23T06:40:00Z', 'in_transit',       'Portland OR, US',  'Arrived at facility'),
 ('S-3022', '2024-10-24T15:12:00Z', 'exception',        'Portland OR, US',  'Address not found: no Apt 12B at 418 Larkspur Ln'),
 ('S-3022', '2024-10-28T09:30:00Z', 'exception',        'Portland OR, US',  'Second delivery attempt failed: address not found'),
 ('S-3022', '2024-11-02T11:00:00Z', 'returned_to_sender', 'Reno NV, US',    'Returned to sender: undeliverable as addressed'),
 ('S-3024', '2024-10-23T10:00:00Z', 'picked_up',        'Barcelona, ES',    'Shipment picked up'),
 ('S-3024', '2024-10-24T02:15:00Z', 'in_transit',       'Leipzig, DE',      'Processed at DHL hub Leipzig'),
 ('S-3024', '2024-11-07T09:00:00Z', 'exception',        'Leipzig, DE',      'Shipment not located; investigation opened'),
 ('S-3024', '2024-11-15T13:30:00Z', 'lost',             'Leipzig, DE',      'Investigation closed: shipment lost'),
 ('S-3025', '2024-10-25T15:00:00Z', 'picked_up',        'Bologna, IT',      'Ritirata'),
 ('S-3025', '2024-10-28T10:20:00Z', 'delivered',        'Milano, IT',       'Consegnata'),
 ('S-3027', '2024-10-31T08:10:00Z', 'picked_up',        'Paris, FR',        'Pris en charge'),
 ('S-3027', '2024-11-02T11:25:00Z', 'delivered',        'Lyon 69003, FR',   'Livré'),
 ('S-3028', '2024-11-02T08:00:00Z', 'picked_up',        'Johannesburg, ZA', 'Picked up'),
 ('S-3028', '2024-11-05T14:45:00Z', 'delivered',        'Cape Town, ZA',    'Delivered, signed by MBEKI'),
 ('S-3029', '2024-11-05T09:20:00Z', 'picked_up',        'Newark NJ, US',    'Accepted at USPS origin facility'),
 ('S-3029', '2024-11-06T22:05:00Z', 'in_transit',       'Brooklyn NY, US',  'Arrived at post office'),
 ('S-3030', '2024-11-07T10:00:00Z', 'picked_up',        'London, GB',       'Collected from warehouse'),
 ('S-3030', '2024-11-08T12:30:00Z', 'delivered',        'London E17, GB',   'Delivered through letterbox'),
 ('S-3034', '2024-11-12T09:00:00Z', 'picked_up',        'Singapore, SG',    'Item posted'),
 ('S-3034', '2024-11-13T07:30:00Z', 'in_transit',       'Singapore, SG',    'Sorted for delivery'),
 ('S-3035', '2024-11-12T10:00:00Z', 'picked_up',        'Osaka, JP',        'Posting/Collection'),
 ('S-3035', '2024-11-13T15:20:00Z', 'delivered',        'Tokyo, JP',        'Final delivery'),
 ('S-3036', '2024-11-15T08:40:00Z', 'picked_up',        'Hamburg, DE',      'Shipment picked up'),
 ('S-3036', '2024-11-16T11:55:00Z', 'delivered',        'Berlin, DE',       'Delivered to mailbox');
