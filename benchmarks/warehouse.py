"""A made-up company warehouse of any size, and questions about it in business words.

`generate(n)` returns `n` tables (as introspection would return them: `agent.schema.Table`) across
ten business domains: about forty core tables written by hand, with comments a data team would
write, a few confusable copies of them (a legacy table, a staging table, a snapshot), and as many
generated tables as it takes to reach `n` (event logs, daily aggregates, dimension tables, audit
trails for entities such as "vendor payouts" or "warehouse bins"), each of 20-60 columns with
comments, and sampled values for low-cardinality columns. The same `n` and seed give the same tables.

`QUESTIONS` are what a person would ask, in their words rather than the tables' names, with the
core tables each one needs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agent.schema import Column, Table

# Core tables: "db.name | comment | rows", then "  column type | comment [| value, value]" lines.
CORE = """
sales.orders | Customer orders from the web shop and stores, one row per order; the source for order counts | 48000000
  order_id UInt64 | Order identifier
  customer_id UInt64 | The buyer (crm.customers)
  store_id UInt32 | Store the order was placed in; 0 for the web shop
  ordered_at DateTime | When the order was placed
  status LowCardinality(String) | Order status | placed, paid, shipped, delivered, cancelled, returned
  channel LowCardinality(String) | Sales channel | web, app, store, marketplace
  total_amount Decimal(18, 2) | Order value including tax, in the order currency
  currency LowCardinality(String) | ISO currency of the order | EUR, USD, GBP
  discount_code String | Promotion code applied at checkout
sales.order_lines | Line items of orders: one row per product in an order, with quantity and price | 190000000
  order_id UInt64 | The order (sales.orders)
  product_id UInt64 | The product sold (catalog.products)
  quantity UInt32 | Units sold
  unit_price Decimal(18, 2) | Price per unit before discount
  line_discount Decimal(18, 2) | Discount on this line
sales.orders_legacy | Orders from the old shop platform until 2019; deprecated, use sales.orders | 9000000
  order_id UInt64 | Order identifier on the old platform
  cust_id UInt64 | Buyer
  order_dt Date | Order date
  amt Decimal(18, 2) | Order value
sales.stg_orders | Staging copy of orders as loaded from the shop's export, before deduplication | 52000000
  raw_order_id String | Order identifier as exported
  payload String | Raw JSON of the order
  loaded_at DateTime | Load time
sales.stores | Physical stores with their city, country, opening date and floor area | 310
  store_id UInt32 | Store identifier
  city String | City
  country LowCardinality(String) | Country | DE, FR, NL, UK, US
  opened_on Date | Opening date
  floor_area_m2 UInt32 | Sales floor area in square metres
sales.sales_targets | Monthly sales targets per store and region, set by finance | 22000
  store_id UInt32 | Store
  month Date | Month of the target
  target_amount Decimal(18, 2) | Revenue target for the month
crm.customers | Customers: each person or company that bought or registered, with signup date and segment | 6100000
  customer_id UInt64 | Customer identifier
  signed_up_at DateTime | When the customer registered
  country LowCardinality(String) | Country of residence | DE, FR, NL, UK, US
  segment LowCardinality(String) | Customer segment | consumer, small business, enterprise
  email_opt_in UInt8 | Agreed to marketing email
  birth_year UInt16 | Year of birth
crm.customers_snapshot | Nightly snapshot of the customers table, kept 90 days for audits | 540000000
  snapshot_date Date | Date of the snapshot
  customer_id UInt64 | Customer identifier
  segment LowCardinality(String) | Customer segment | consumer, small business, enterprise
crm.loyalty_members | Members of the loyalty programme, their tier and points balance | 2300000
  customer_id UInt64 | The member (crm.customers)
  tier LowCardinality(String) | Loyalty tier | bronze, silver, gold, platinum
  points_balance Int64 | Points not yet redeemed
  joined_at DateTime | When the customer joined the programme
crm.customer_addresses | Postal addresses of customers, shipping and billing | 7400000
  customer_id UInt64 | Customer
  kind LowCardinality(String) | Address kind | shipping, billing
  postcode String | Postal code
  city String | City
finance.invoices | Invoices issued to customers; revenue is recognised from invoices, net of credit notes | 31000000
  invoice_id UInt64 | Invoice number
  customer_id UInt64 | Billed customer
  issued_on Date | Issue date
  net_amount Decimal(18, 2) | Amount before tax
  tax_amount Decimal(18, 2) | VAT charged
  status LowCardinality(String) | Payment status | open, paid, overdue, written off
finance.payments | Payments received from customers: card, transfer, wallet; one row per settled payment | 29000000
  payment_id UInt64 | Payment identifier
  invoice_id UInt64 | Invoice paid
  paid_at DateTime | Settlement time
  method LowCardinality(String) | Payment method | card, bank transfer, paypal, apple pay
  amount Decimal(18, 2) | Amount received
finance.refunds | Money returned to customers for returned or cancelled orders | 1900000
  refund_id UInt64 | Refund identifier
  order_id UInt64 | The order refunded
  refunded_at DateTime | When the money was returned
  amount Decimal(18, 2) | Amount refunded
  reason LowCardinality(String) | Why | damaged, late delivery, changed mind, wrong item
finance.credit_notes | Credit notes that reduce invoiced revenue (corrections, goodwill) | 410000
  credit_note_id UInt64 | Credit note number
  invoice_id UInt64 | Invoice corrected
  amount Decimal(18, 2) | Amount credited
finance.general_ledger | General ledger journal entries by account and cost centre | 88000000
  entry_id UInt64 | Journal entry
  account_code String | Ledger account
  cost_centre String | Cost centre
  debit Decimal(18, 2) | Debit
  credit Decimal(18, 2) | Credit
  posted_on Date | Posting date
finance.exchange_rates | Daily currency exchange rates to euro | 41000
  rate_date Date | Day
  currency LowCardinality(String) | Currency | USD, GBP, CHF, SEK
  rate_to_eur Float64 | Units of euro per unit of currency
finance.budget | Yearly budget per department and cost centre | 5200
  department String | Department
  year UInt16 | Budget year
  budget_amount Decimal(18, 2) | Budgeted spend
billing.subscriptions | Paid subscriptions to the membership plan; churn is a subscription that ended | 840000
  subscription_id UInt64 | Subscription
  customer_id UInt64 | Subscriber
  plan LowCardinality(String) | Plan | basic, plus, family
  started_at DateTime | Start of the subscription
  ended_at Nullable(DateTime) | When it was cancelled; NULL while active
  monthly_price Decimal(10, 2) | Price per month
billing.subscription_events | Plan changes of subscriptions: upgrade, downgrade, pause, cancel | 2100000
  subscription_id UInt64 | Subscription
  event_at DateTime | When
  event LowCardinality(String) | What changed | upgrade, downgrade, pause, resume, cancel
billing.trials | Free trials of the membership plan and whether they converted to paid | 1300000
  customer_id UInt64 | Customer on trial
  trial_started_at DateTime | Start of the trial
  converted UInt8 | Became a paid subscription
marketing.campaigns | Marketing campaigns with channel, budget and dates | 3800
  campaign_id UInt32 | Campaign
  name String | Campaign name
  channel LowCardinality(String) | Channel | email, search, social, display, tv
  budget Decimal(18, 2) | Planned spend
  starts_on Date | Start
marketing.ad_spend | Daily advertising spend and impressions per campaign and ad network | 2400000
  campaign_id UInt32 | Campaign
  day Date | Day
  network LowCardinality(String) | Ad network | google, meta, tiktok, bing
  spend Decimal(18, 2) | Money spent
  impressions UInt64 | Ads shown
  clicks UInt64 | Clicks
marketing.email_sends | Marketing emails sent, opened and clicked, one row per email per recipient | 910000000
  campaign_id UInt32 | Campaign
  customer_id UInt64 | Recipient
  sent_at DateTime | Sent
  opened UInt8 | Opened
  clicked UInt8 | Clicked
  unsubscribed UInt8 | Unsubscribed from this email
marketing.attribution | Orders attributed to the marketing touchpoint that led to them (last click) | 39000000
  order_id UInt64 | Order
  campaign_id UInt32 | Campaign credited
  touch_at DateTime | Time of the touchpoint
catalog.products | Products for sale with their category, brand and list price | 260000
  product_id UInt64 | Product
  name String | Product name
  category LowCardinality(String) | Category | shoes, jackets, shirts, bags, accessories
  brand LowCardinality(String) | Brand
  list_price Decimal(18, 2) | Recommended retail price
catalog.product_reviews | Ratings and written reviews customers left for products | 4100000
  product_id UInt64 | Product
  customer_id UInt64 | Reviewer
  rating UInt8 | Stars, 1 to 5
  review_text String | The review
  reviewed_at DateTime | When
catalog.price_history | Every change of a product's price, with the old and new price | 7300000
  product_id UInt64 | Product
  changed_at DateTime | When
  old_price Decimal(18, 2) | Before
  new_price Decimal(18, 2) | After
logistics.shipments | Parcels shipped to customers with carrier, dispatch and delivery times | 44000000
  shipment_id UInt64 | Parcel
  order_id UInt64 | Order shipped
  carrier LowCardinality(String) | Delivery carrier | dhl, ups, postnl, dpd
  dispatched_at DateTime | Left the warehouse
  delivered_at Nullable(DateTime) | Delivered to the customer
logistics.returns | Items customers sent back, with the return reason and condition | 5200000
  order_id UInt64 | Order
  product_id UInt64 | Item returned
  received_at DateTime | Arrived back at the warehouse
  reason LowCardinality(String) | Reason given | too small, too large, damaged, not as described
logistics.inventory | Stock on hand per product and warehouse, daily | 95000000
  product_id UInt64 | Product
  warehouse_id UInt16 | Warehouse
  day Date | Day
  units_on_hand Int64 | Units in stock at end of day
logistics.warehouses | Distribution centres with their location and capacity | 14
  warehouse_id UInt16 | Warehouse
  city String | City
  capacity_units UInt64 | Storage capacity
logistics.suppliers | Suppliers the company buys products from, with country and lead time | 1900
  supplier_id UInt32 | Supplier
  name String | Supplier name
  country LowCardinality(String) | Country | CN, VN, PT, TR, IT
  lead_time_days UInt16 | Days from purchase order to delivery
logistics.purchase_orders | Purchase orders sent to suppliers for restocking | 610000
  po_id UInt64 | Purchase order
  supplier_id UInt32 | Supplier
  ordered_on Date | Ordered
  total_cost Decimal(18, 2) | Cost of the order
support.tickets | Customer support tickets: topic, channel, opened and resolved times, satisfaction score | 3300000
  ticket_id UInt64 | Ticket
  customer_id UInt64 | Customer who asked for help
  opened_at DateTime | Opened
  resolved_at Nullable(DateTime) | Resolved
  topic LowCardinality(String) | Topic | delivery, refund, payment, product, account
  csat Nullable(UInt8) | Customer satisfaction score, 1 to 5
support.agents | Support agents with their team and hire date | 640
  agent_id UInt32 | Agent
  team LowCardinality(String) | Team | tier 1, tier 2, billing, escalations
  hired_on Date | Hired
support.chat_messages | Messages exchanged in support live chats | 71000000
  ticket_id UInt64 | Ticket
  sent_at DateTime | Sent
  sender LowCardinality(String) | Who wrote | customer, agent, bot
hr.employees | Employees with department, job title, hire date and location | 12400
  employee_id UInt32 | Employee
  department LowCardinality(String) | Department | sales, finance, logistics, engineering, support, marketing
  job_title String | Title
  hired_on Date | Hire date
  left_on Nullable(Date) | Leaving date; NULL while employed
hr.salaries | Salary history of employees: annual gross pay from each effective date | 61000
  employee_id UInt32 | Employee
  effective_from Date | From
  annual_salary Decimal(18, 2) | Gross yearly pay
hr.absences | Sick leave and holidays taken by employees | 410000
  employee_id UInt32 | Employee
  starts_on Date | First day
  days Float32 | Working days
  kind LowCardinality(String) | Kind | sick, holiday, parental, unpaid
web.sessions | Visits to the website and app: one row per session with device, source and landing page | 1200000000
  session_id String | Session
  customer_id Nullable(UInt64) | Logged-in customer
  started_at DateTime | Start of the visit
  device LowCardinality(String) | Device | desktop, mobile, tablet
  traffic_source LowCardinality(String) | Where the visitor came from | organic, paid search, email, social, direct
web.page_views | Pages viewed during sessions | 9800000000
  session_id String | Session
  url String | Page
  viewed_at DateTime | When
web.searches | Searches typed into the shop's search box and how many results they returned | 640000000
  session_id String | Session
  query String | What was searched
  results UInt32 | Results shown
web.cart_events | Add-to-cart and remove-from-cart events; abandoned carts are carts never checked out | 870000000
  session_id String | Session
  product_id UInt64 | Product
  event LowCardinality(String) | Event | add, remove, checkout
  event_at DateTime | When
"""

# Questions in business words, with the core tables each needs.
QUESTIONS: list[tuple[str, list[str]]] = [
    ("How much did we sell last month, by sales channel?", ["sales.orders"]),
    ("Which products sold the most units in the spring?", ["sales.order_lines", "catalog.products"]),
    ("What share of purchases used a promotion code?", ["sales.orders"]),
    ("Which stores missed their monthly target?", ["sales.sales_targets", "sales.orders"]),
    ("How many new customers registered each week?", ["crm.customers"]),
    ("How many gold tier members do we have in the loyalty programme?", ["crm.loyalty_members"]),
    ("Which cities do most of our buyers ship to?", ["crm.customer_addresses"]),
    ("What was recognised revenue per quarter, net of credit notes?", ["finance.invoices", "finance.credit_notes"]),
    ("How much money did we give back to customers, and why?", ["finance.refunds"]),
    ("Which payment methods do customers prefer?", ["finance.payments"]),
    ("How many invoices are overdue?", ["finance.invoices"]),
    ("What is the dollar to euro rate trend this year?", ["finance.exchange_rates"]),
    ("How does spending per department compare with budget?", ["finance.budget", "finance.general_ledger"]),
    ("What is our monthly subscriber churn?", ["billing.subscriptions"]),
    ("What percentage of free trials convert to paying members?", ["billing.trials"]),
    ("How many members upgraded their plan last quarter?", ["billing.subscription_events"]),
    ("Which ad network gives the cheapest clicks?", ["marketing.ad_spend"]),
    ("What is the open rate of our newsletters?", ["marketing.email_sends"]),
    ("Which campaigns drove the most orders?", ["marketing.attribution", "marketing.campaigns"]),
    ("What is the average star rating per brand?", ["catalog.product_reviews", "catalog.products"]),
    ("How often did we raise prices on jackets?", ["catalog.price_history", "catalog.products"]),
    ("How long does delivery take with each courier?", ["logistics.shipments"]),
    ("Why do people send items back?", ["logistics.returns"]),
    ("Which products are running out of stock?", ["logistics.inventory"]),
    ("Which vendors have the longest lead times?", ["logistics.suppliers"]),
    ("How much did we spend on restocking from each supplier?", ["logistics.purchase_orders", "logistics.suppliers"]),
    ("How quickly are help desk tickets about refunds resolved?", ["support.tickets"]),
    ("What is customer satisfaction by support team?", ["support.tickets", "support.agents"]),
    ("How many staff left the company this year, per department?", ["hr.employees"]),
    ("What is the average pay in engineering?", ["hr.salaries", "hr.employees"]),
    ("How many sick days were taken per month?", ["hr.absences"]),
    ("How many visits came from mobile phones?", ["web.sessions"]),
    ("What do shoppers search for that returns nothing?", ["web.searches"]),
    ("How many shopping carts are abandoned?", ["web.cart_events"]),
    ("Which traffic sources bring the most visitors?", ["web.sessions"]),
    ("How many people unsubscribed from marketing emails last month?", ["marketing.email_sends"]),
]

# Words for generated tables: per domain, things a warehouse keeps, and what it keeps about them.
DOMAIN_NOUNS = {
    "sales": ["quote", "basket", "voucher", "gift card", "store visit", "sales rep", "commission", "price list"],
    "crm": ["lead", "contact", "consent", "household", "segment", "preference", "survey response", "account"],
    "finance": ["accrual", "journal", "tax filing", "vendor payout", "chargeback", "fx hedge", "cost allocation"],
    "billing": ["plan", "coupon", "dunning attempt", "usage record", "proration", "billing cycle", "entitlement"],
    "marketing": ["audience", "creative", "landing page", "utm link", "affiliate", "influencer", "push message"],
    "catalog": ["variant", "size chart", "image", "bundle", "collection", "attribute", "taxonomy node"],
    "logistics": ["warehouse bin", "pick list", "pallet", "carrier rate", "customs declaration", "route", "dock slot"],
    "support": ["macro", "sla policy", "queue", "callback", "knowledge article", "escalation", "chatbot intent"],
    "hr": ["candidate", "interview", "training", "shift", "performance review", "benefit", "payroll run"],
    "web": ["experiment", "feature flag", "error", "click", "scroll depth", "push subscription", "app release"],
}
KINDS = [
    ("{noun}s", "{Noun}s: one row per {noun}, with its attributes"),
    ("{noun}_events", "Event log of changes to {noun}s"),
    ("{noun}_daily", "Daily aggregate of {noun}s per day and region"),
    ("dim_{noun}", "Dimension table of {noun}s for reporting"),
    ("{noun}_audit", "Audit trail of edits to {noun}s"),
    ("stg_{noun}s", "Staging load of {noun}s from the source system"),
    ("{noun}_snapshot", "Weekly snapshot of {noun}s"),
    ("{noun}_monthly", "Monthly rollup of {noun} metrics"),
]
FILLER_COLUMNS = [
    ("created_at", "DateTime", "Row created"),
    ("updated_at", "DateTime", "Row last changed"),
    ("dw_load_id", "UInt64", "Warehouse load batch"),
    ("source_system", "LowCardinality(String)", "System the row came from"),
    ("is_deleted", "UInt8", "Soft-deleted in the source"),
    ("region_code", "LowCardinality(String)", "Sales region"),
    ("owner_team", "LowCardinality(String)", "Team that owns the record"),
    ("external_ref", "String", "Identifier in the source system"),
    ("notes", "String", "Free text notes"),
    ("valid_from", "Date", "Validity start"),
    ("valid_to", "Date", "Validity end"),
    ("version", "UInt32", "Record version"),
]
SAMPLED = {"source_system": ["erp", "shop", "crm", "manual"], "region_code": ["emea", "amer", "apac"]}


@dataclass(frozen=True)
class Warehouse:
    tables: list[Table]
    questions: list[tuple[str, list[str]]]


def core_tables() -> list[Table]:
    tables: list[Table] = []
    for line in CORE.strip().splitlines():
        if not line.startswith("  "):
            name, comment, rows = (part.strip() for part in line.split("|"))
            database, table = name.split(".")
            tables.append(Table(database, table, "MergeTree", comment, "", int(rows), ""))
            continue
        parts = [part.strip() for part in line.strip().split("|")]
        column, type_ = parts[0].split(" ", 1)
        samples = sorted(v.strip() for v in parts[2].split(",")) if len(parts) > 2 else []
        tables[-1].columns.append(Column(column, type_, parts[1], samples, len(samples) or None))
    return tables


def generated_tables(count: int, rng: random.Random) -> list[Table]:
    combos = [(db, noun, kind) for db, nouns in DOMAIN_NOUNS.items() for noun in nouns for kind in KINDS]
    rng.shuffle(combos)
    tables = []
    for index in range(count):
        database, noun, (name, comment) = combos[index % len(combos)]
        round_ = index // len(combos)
        table = name.format(noun=noun.replace(" ", "_")) + (f"_v{round_ + 1}" if round_ else "")
        text = comment.format(noun=noun, Noun=noun.capitalize())
        if round_:
            text += f" (copy {round_ + 1}, for a regional team)"
        tables.append(Table(database, table, "MergeTree", text, "", rng.randrange(100, 50_000_000), ""))
        key = noun.replace(" ", "_")
        tables[-1].columns += [
            Column(f"{key}_id", "UInt64", f"The {noun}"),
            Column(f"{key}_name", "String", f"Name of the {noun}"),
            Column(f"{key}_status", "LowCardinality(String)", f"Status of the {noun}", ["active", "closed"], 2),
        ]
    return tables


def pad_columns(table: Table, rng: random.Random) -> None:
    """Up to 20-60 columns: the bookkeeping columns every warehouse table grows, then attributes."""
    target = rng.randrange(20, 61)
    extra = [c for c in FILLER_COLUMNS if c[0] not in {col.name for col in table.columns}]
    for name, type_, comment in extra[: max(0, target - len(table.columns))]:
        samples = SAMPLED.get(name, [])
        table.columns.append(Column(name, type_, comment, samples, len(samples) or None))
    attribute = 1
    while len(table.columns) < target:
        table.columns.append(Column(f"attr_{attribute:02d}", "String", f"Source attribute {attribute}"))
        attribute += 1


def generate(table_count: int, seed: int = 18) -> Warehouse:
    rng = random.Random(seed)
    tables = core_tables()
    tables += generated_tables(max(0, table_count - len(tables)), rng)
    for table in tables:
        pad_columns(table, rng)
    return Warehouse(tables[:table_count] if table_count < len(tables) else tables, QUESTIONS)


def ddl(tables: list[Table]) -> list[str]:
    """CREATE statements for the tables (MergeTree tables with their comments), databases first, and a
    few rows holding the sampled values of each low-cardinality column (so introspection samples them)."""

    def quote(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    statements = [f"CREATE DATABASE IF NOT EXISTS {db}" for db in sorted({t.database for t in tables})]
    for t in tables:
        columns = ", ".join(f"`{c.name}` {c.type} COMMENT {quote(c.comment)}" for c in t.columns)
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {t.database}.`{t.name}` ({columns}) ENGINE = MergeTree ORDER BY tuple() "
            f"COMMENT {quote(t.comment)}"
        )
        sampled = [c for c in t.columns if c.samples]
        if sampled:
            rows = max(len(c.samples) for c in sampled)
            names = ", ".join(f"`{c.name}`" for c in sampled)
            values = ", ".join(
                "(" + ", ".join(quote(c.samples[i % len(c.samples)]) for c in sampled) + ")" for i in range(rows)
            )
            statements.append(f"INSERT INTO {t.database}.`{t.name}` ({names}) VALUES {values}")
    return statements
