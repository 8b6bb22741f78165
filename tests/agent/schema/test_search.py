"""The lookup's search on small real-shaped schemas: split-table families, wide tables, join tables a
question does not name, and the database a question belongs to."""

from __future__ import annotations

from agent.schema import Catalog, Column, Table
from agent.schema.joins import JoinGraph


def table(qualified: str, columns: str, comment: str = "") -> Table:
    """A table from `db.name` and space-separated `name:Type` (Type defaults to String) columns."""
    database, name = qualified.split(".", 1)
    parsed = [Column(*(part.split(":") if ":" in part else (part, "String")), "") for part in columns.split()]
    return Table(database, name, "MergeTree", comment, "", None, "", parsed)


SESSION_COLUMNS = (
    "visit_id:UInt64 visitor_id:UInt64 visit_start_time:DateTime device_browser geo_country pageviews:UInt32"
)


def analytics() -> list[Table]:
    """A web analytics export: one sessions table per day, as such exports write them, and others."""
    days = [f"ga.ga_sessions_201709{day:02d}" for day in range(1, 31)]
    return [
        *(table(name, SESSION_COLUMNS) for name in days),
        table("ga.campaigns", "campaign_id name channel budget:Float64"),
        table("ga.goals", "goal_id name value:Float64"),
    ]


def test_a_family_of_split_tables_is_one_hit_for_the_date_the_question_names() -> None:
    catalog = Catalog(analytics(), "ga")
    found = catalog.search("How many sessions and pageviews by country on September 15, 2017?", 5)
    assert found[0] == "ga.ga_sessions_20170915"
    assert sum(name.startswith("ga.ga_sessions_") for name in found) == 1  # one hit, not thirty
    assert catalog.search("pageviews by browser on 2017-09-03", 5)[0] == "ga.ga_sessions_20170903"
    assert catalog.search("sessions by browser", 5)[0] == "ga.ga_sessions_20170930"  # no date: the newest
    assert len(catalog.family("ga.ga_sessions_20170930")) == 30


def test_a_family_of_split_tables_is_one_catalogue_line_with_its_range() -> None:
    text = Catalog(analytics(), "ga").render(10_000).text
    assert text.count("ga_sessions_") == 3, text  # the newest's line, naming the first and the last
    assert (
        "- ga_sessions_20170930 [one of 30 tables split by date or number, ga_sessions_20170901 … ga_sessions_20170930]"
        in text
    )


def test_copies_with_the_same_columns_are_one_hit_shown_by_the_original() -> None:
    columns = "id:Int64 uuid hostname host vm_state memory_mb:Int64 vcpus:Int64 deleted:Int64"
    tables = [
        table("nova.instances", columns),
        table("nova.shadow_instances", columns),
        table("nova.instance_faults", "id:Int64 instance_uuid code message host"),
        table("nova.shadow_instance_faults", "id:Int64 instance_uuid code message host"),
        table("nova.migrations", "id:Int64 instance_uuid source_compute dest_compute status"),
    ]
    found = Catalog(tables, "nova").search("instances by vm state and host", 5)
    assert found[:2] == ["nova.instances", "nova.instance_faults"]
    assert not any(name.startswith("nova.shadow_") for name in found)


def wide_and_narrow() -> list[Table]:
    wide = " ".join(
        f"{kind}_{part}_{n}:Float64"
        for kind in ("order", "refund", "payment", "customer", "amount", "shipping")
        for part in ("total", "amount", "reason", "count", "net")
        for n in range(10)
    )
    return [
        table("shop.order_events_wide", f"event_id:UInt64 {wide}", "Everything about an order, one column per metric"),
        table("shop.refunds", "refund_id:UInt64 order_id:UInt64 amount:Float64 reason created_at:DateTime"),
        table("shop.orders", "order_id:UInt64 customer_id:UInt64 total:Float64 ordered_at:DateTime"),
        table("shop.customers", "customer_id:UInt64 name country"),
    ]


def test_a_wide_table_does_not_outrank_the_narrow_table_the_question_is_about() -> None:
    assert len(wide_and_narrow()[0].columns) == 301
    found = Catalog(wide_and_narrow(), "shop").search("refund amount by reason", 3)
    assert found[0] == "shop.refunds"


def bank() -> list[Table]:
    """BIRD's `financial` database, shaped as it is: `disp` links clients to accounts and is never named."""
    return [
        table("financial.account", "account_id:Int64 district_id:Int64 frequency date:Date"),
        table("financial.client", "client_id:Int64 gender birth_date:Date district_id:Int64"),
        table("financial.disp", "disp_id:Int64 client_id:Int64 account_id:Int64 type"),
        table("financial.card", "card_id:Int64 disp_id:Int64 type issued:Date"),
        table("financial.district", "district_id:Int64 A2 A3 A4:Int64 A11:Int64"),
        table("financial.loan", "loan_id:Int64 account_id:Int64 date:Date amount:Int64 duration:Int64 status"),
        table("financial.order", "order_id:Int64 account_id:Int64 bank_to account_to amount:Float64 k_symbol"),
        table("financial.trans", "trans_id:Int64 account_id:Int64 date:Date type operation amount:Int64 balance:Int64"),
        table("financial.card_type_codes", "card_type_code description"),
        table("financial.client_gender_codes", "gender description"),
        table("financial.issued_card_batches", "batch_id:Int64 issued:Date type"),
        table("financial.card_fees", "fee_id:Int64 type amount:Float64"),
    ]


def test_a_join_table_the_question_does_not_name_comes_with_the_tables_it_joins() -> None:
    found = Catalog(bank(), "financial").search("gold cards issued to female clients", 5)
    assert {"financial.card", "financial.client", "financial.disp"} <= set(found), found


def test_in_a_warehouse_of_many_databases_the_question_s_own_database_comes_first() -> None:
    others = [
        table("crm.accounts", "account_id:Int64 name"),
        table("geo.districts", "district_id:Int64 name"),
        table("lending.loans", "loan_id:Int64 amount:Float64"),
    ]
    found = Catalog([*bank(), *others], "financial").search("accounts with a loan in each district", 3)
    assert sorted(found) == ["financial.account", "financial.district", "financial.loan"], found


def test_copies_are_found_as_one_even_beside_another_table_with_the_same_columns() -> None:
    columns = "created_at:DateTime id:Int64 protocol from_port:Int64 to_port:Int64 cidr"
    tables = [
        table("nova.rules", columns),  # the same columns, but not what the others copy
        table("nova.security_group_default_rules", columns),
        table("nova.shadow_security_group_default_rules", columns),
    ]
    catalog = Catalog(tables, "nova")
    assert catalog.family("nova.security_group_default_rules") == [
        "nova.security_group_default_rules",
        "nova.shadow_security_group_default_rules",
    ]
    assert catalog.search("default security group rules by protocol", 3) == [
        "nova.security_group_default_rules",
        "nova.rules",
    ]


def test_families_and_joins_are_the_same_whatever_order_introspection_gives() -> None:
    """The catalogue is the cached prefix: the tables in another order must give the same bytes."""
    reports = [
        table("ga.report_2017", "day:Date visits:UInt64 bounces:UInt64 revenue:Float64 country"),
        table("ga.report_2018", "day:Date visits:UInt64 bounces:UInt64 revenue:Float64 country"),
        table("ga.report_2019", "week:Date channel spend:Float64"),  # the same name, other columns
    ]
    tables = [*analytics(), *bank(), *wide_and_narrow(), *reports]
    forward, backward = Catalog(tables, "ga"), Catalog(tables[::-1], "ga")
    assert forward.render(10_000).text == backward.render(10_000).text
    for words in ("sessions by browser", "gold cards issued to female clients", "visits and revenue by country"):
        assert forward.search(words, 10) == backward.search(words, 10)


def test_a_polite_command_before_the_question_is_not_searched_for() -> None:
    # BIRD's superhero beside BEAVER's dw, pooled: "Please list..." must not find the tables named LIST.
    tables = [
        table("superhero.superhero", "id:Int64 superhero_name full_name height_cm:Int64 publisher_id:Int64"),
        table("superhero.superpower", "id:Int64 power_name"),
        table("superhero.hero_power", "hero_id:Int64 power_id:Int64"),
        table("dw.MOIRA_LIST", "LIST_ID LIST_NAME LIST_DESCRIPTION"),
        table("dw.MOIRA_LIST_OWNER", "LIST_ID OWNER_NAME"),
        table("dw.MOIRA_LIST_DETAIL", "LIST_ID MEMBER_NAME"),
    ]
    catalog = Catalog(tables, "default")
    for question in ("Please list all the superpowers of 3-D Man.", "Can you list the superpowers of 3-D Man?"):
        assert not any(name.startswith("dw.") for name in catalog.search(question, 3)), question
    assert catalog.search("list owners", 1) == ["dw.MOIRA_LIST_OWNER"]  # what follows the command is searched


def university_warehouse() -> list[Table]:
    """A data warehouse as MIT's `dw` is: hundreds of tables of codes of its own, and between them
    nearly every word a question about something else uses, one here, one there."""
    syllables = ("ba", "ke", "li", "mo", "nu", "ra", "se", "ti", "vo", "zu", "da", "fe", "gi", "ho", "pu")
    codes = [f"{a}{b}{c}" for a in syllables for b in syllables for c in syllables[:4]]  # its own words
    shared = ("MEMBER_TYPE", "EVENT_DATE", "WOMEN_FLAG", "SOCCER_TEAM", "LAST_NAME", "ATTENDED_FLAG")
    tables = []
    for i in range(200):
        columns = [f"{codes[(i * 9 + j) % len(codes)]}_CODE" for j in range(9)]
        if i % 20 == 0:
            columns.append(shared[(i // 20) % len(shared)])
        tables.append(table(f"dw.{codes[-1 - i].upper()}_DETAIL", " ".join(columns)))
    return tables


def small_databases() -> list[Table]:
    """Spider's many small databases beside it, a few tables each."""
    return [
        table(f"{db}.{name}", f"{name}_id:Int64 name {extra}")
        for db, names, extra in (
            ("concert_singer", ("singer", "concert", "stadium"), "capacity:Int64 country"),
            ("pets_1", ("student", "pet", "has_pet"), "age:Int64 weight:Float64"),
            ("world_1", ("city", "country", "countrylanguage"), "population:Int64 region"),
            ("flight_2", ("airlines", "airports", "flights"), "city country"),
        )
        for name in names
    ]


def club() -> list[Table]:
    """BIRD's `student_club`, as small as it is."""
    return [
        table("student_club.member", "member_id first_name last_name email position link_to_major"),
        table("student_club.event", "event_id event_name event_date type notes location status"),
        table("student_club.attendance", "link_to_event link_to_member"),
        table("student_club.major", "major_id major_name department college"),
    ]


def test_a_large_database_that_has_every_word_somewhere_does_not_outrank_the_small_one_the_question_is_about() -> None:
    catalog = Catalog([*university_warehouse(), *club(), *small_databases()], "default")
    found = catalog.search("List the last names of the members who attended the women's soccer event.", 5)
    assert {"student_club.member", "student_club.event", "student_club.attendance"} <= set(found), found


def heroes() -> list[Table]:
    """BIRD's `superhero`: its keys name their tables by a word of them (`eye_colour_id` -> `colour`,
    `hero_id` -> `superhero`, `power_id` -> `superpower`)."""
    return [
        table("superhero.superhero", "id:Int64 superhero_name full_name eye_colour_id:Int64 race_id:Int64"),
        table("superhero.colour", "id:Int64 colour"),
        table("superhero.race", "id:Int64 race"),
        table("superhero.superpower", "id:Int64 power_name"),
        table("superhero.hero_power", "hero_id:Int64 power_id:Int64"),
        table("superhero.attribute", "id:Int64 attribute_name"),
        table("superhero.hero_attribute", "hero_id:Int64 attribute_id:Int64 attribute_value:Int64"),
    ]


def test_a_key_column_joins_the_table_a_word_of_its_name_names() -> None:
    joins = JoinGraph(heroes())
    assert "superhero.colour" in joins.neighbours("superhero.superhero")  # eye_colour_id
    assert "superhero.superhero" in joins.neighbours("superhero.hero_power")  # hero_id
    assert "superhero.superpower" in joins.neighbours("superhero.hero_power")  # power_id, not hero_power itself
    found = Catalog(heroes(), "superhero").search("What is Abomination's superpower?", 5)
    assert {"superhero.superhero", "superhero.hero_power", "superhero.superpower"} <= set(found), found


def test_a_link_column_without_a_key_suffix_joins_the_table_it_names() -> None:
    """`student_club` links by `link_to_member`, `link_to_major`, and `zip` (to `zip_code`)."""
    tables = [*club(), table("student_club.zip_code", "zip_code type city county state")]
    tables[0].columns.append(Column("zip", "Int64", ""))
    joins = JoinGraph(tables)
    assert {"student_club.major", "student_club.zip_code"} <= joins.neighbours("student_club.member")
    assert "student_club.member" in joins.neighbours("student_club.attendance")
    found = Catalog(tables, "student_club").search("Which college is the vice president of the club from?", 5)
    assert {"student_club.member", "student_club.major"} <= set(found), found
    found = Catalog(tables, "student_club").search("What county did Sherri Ramsey grow up in?", 5)
    assert {"student_club.member", "student_club.zip_code"} <= set(found), found


def racing() -> list[Table]:
    """BIRD's `formula_1`, where `driverStandings` is shorter than `drivers` and shares its word."""
    return [
        table("formula_1.drivers", "driverId:Int64 driverRef number code forename surname dob:Date nationality url"),
        table("formula_1.driverStandings", "driverStandingsId:Int64 raceId:Int64 driverId:Int64 points position wins"),
        table("formula_1.races", "raceId:Int64 year:Int64 round:Int64 circuitId:Int64 name date:Date url"),
        table("formula_1.circuits", "circuitId:Int64 circuitRef name location country lat lng url"),
    ]


def test_a_table_the_question_names_whole_outranks_one_that_shares_a_word_of_its_name() -> None:
    found = Catalog(racing(), "formula_1").search("Which drivers were born in 1985?", 1)
    assert found == ["formula_1.drivers"], found


def test_an_id_the_question_quotes_is_not_searched_for_its_pieces() -> None:
    """A UUID's pieces (`ab`, `bb`, `ef`...) matched a baseball table's columns, pooled beside `nova`."""
    tables = [
        table("nova.instances", "id:Int64 uuid hostname vm_state"),
        table("nova.instance_info_caches", "id:Int64 instance_uuid network_info"),
        table("nova.security_groups", "id:Int64 name description project_id"),
        table("baseball.team", "team_id year ab bb cf de ef fe cd ae af ba da"),
    ]
    question = (
        "Provide information (including info caches and security groups) for these VMs "
        "dae33792-fddf-4ef1-b06f-aca2d8cf90e2, 2eaa5fee-b472-46b0-a79a-9df601646581, "
        "5c1881f2-face-4e2a-aa92-17d9848f2a96"
    )
    found = Catalog(tables, "default").search(question, 3)
    assert "baseball.team" not in found, found


def test_a_table_that_many_plain_columns_name_is_linked_to_none_of_them() -> None:
    tables = [table("ops.status", "status description")]
    tables += [table(f"ops.job_{n}", f"job_{n}_id:Int64 status") for n in range(8)]
    tables += [table("ops.event", "event_id:Int64 name"), table("ops.ticket", "ticket_id:Int64 link_to_event")]
    joins = JoinGraph(tables)
    assert joins.neighbours("ops.status") == set()
    assert joins.neighbours("ops.ticket") == {"ops.event"}


def test_a_camel_case_column_joins_the_table_its_last_word_names() -> None:
    """Spider's `flight_2`: `flights.SourceAirport` and `DestAirport` hold an `airports.AirportCode`."""
    tables = [
        table("flight_2.airlines", "uid:Int64 Airline Abbreviation Country"),
        table("flight_2.airports", "City AirportCode AirportName Country CountryAbbrev"),
        table("flight_2.flights", "Airline FlightNo:Int64 SourceAirport DestAirport"),
    ]
    assert "flight_2.airports" in JoinGraph(tables).neighbours("flight_2.flights")
    football = [table("soccer.Player", "player_api_id:Int64 player_name"), table("soccer.Match", "home_player_1:Int64")]
    assert JoinGraph(football).neighbours("soccer.Match") == {"soccer.Player"}  # a numbered column: a player
    found = Catalog(tables, "flight_2").search("How many flights fly from Aberdeen to Ashley?", 5)
    assert {"flight_2.flights", "flight_2.airports"} <= set(found), found


def all_heroes() -> list[Table]:
    """BIRD's `superhero` whole: the hero table keys eight lookups, each of which is a plain join."""
    hero = (
        "id:Int64 superhero_name full_name gender_id:Int64 eye_colour_id:Int64 hair_colour_id:Int64 "
        "skin_colour_id:Int64 race_id:Int64 publisher_id:Int64 alignment_id:Int64 height_cm:Int64 weight_kg:Int64"
    )
    lookups = ("alignment", "colour", "gender", "race")
    return [
        *heroes(),
        table("superhero.superhero", hero),
        table("superhero.publisher", "id:Int64 publisher_name"),
        *(table(f"superhero.{name}", f"id:Int64 {name}") for name in lookups),
    ]


def test_a_question_s_verb_finds_the_table_named_by_its_agent_noun() -> None:
    tables = list({t.qualified: t for t in all_heroes()}.values())  # the whole hero table replaces the short one
    catalog = Catalog(tables, "superhero")
    for question in ("How many superheroes did DC Comics publish?", "Rank heroes published by Marvel Comics"):
        assert "superhero.publisher" in catalog.search(question, 5), catalog.search(question, 5)


def test_the_lookup_a_matched_column_names_outranks_the_other_lookups() -> None:
    # "blue eyes and blond hair" matched `eye_colour_id` and `hair_colour_id`: of the hero table's eight
    # lookups, `colour` is the one the question goes through.
    tables = list({t.qualified: t for t in all_heroes()}.values())
    assert JoinGraph(tables).via("superhero.superhero")["superhero.colour"] >= {"eye_colour_id", "hair_colour_id"}
    found = Catalog(tables, "superhero").search("List the superheroes that have blue eyes and blond hair.", 5)
    assert found[:2] == ["superhero.superhero", "superhero.colour"], found


def test_a_key_column_joins_the_original_of_a_table_kept_with_shadow_copies() -> None:
    # BEAVER's nova keeps a `shadow_` copy of every table: `usage_id` ends two table names, the original's
    # and its copy's, and must still join the original.
    reservations = "id:Int64 uuid usage_id:Int64 resource delta:Int64 expire:DateTime"
    usages = "id:Int64 resource in_use:Int64 reserved:Int64 until_refresh:Int64"
    tables = [
        table("nova.reservations", reservations),
        table("nova.shadow_reservations", reservations),
        table("nova.quota_usages", usages),
        table("nova.shadow_quota_usages", usages),
        table("nova.instances", "id:Int64 uuid host reservation_id"),
    ]
    joins = JoinGraph(tables)
    assert joins.neighbours("nova.reservations") == {"nova.quota_usages", "nova.instances"}
    assert joins.neighbours("nova.shadow_reservations") == joins.neighbours("nova.reservations")  # as its original
    found = Catalog(tables, "nova").search("Provide information about resource reservation expiring soon.", 2)
    assert found == ["nova.reservations", "nova.quota_usages"], found


def races() -> list[Table]:
    """BIRD's `formula_1` as it is shaped: every table keys a race and a driver; only `races` has dates."""
    return [
        table("formula_1.races", "raceId:Int64 year:Int64 round:Int64 circuitId:Int64 name date time url"),
        table("formula_1.drivers", "driverId:Int64 driverRef number code forename surname nationality url"),
        table("formula_1.circuits", "circuitId:Int64 circuitRef name location country lat lng alt url"),
        *(
            table(f"formula_1.{name}", f"{name}Id:Int64 raceId:Int64 driverId:Int64 {columns}")
            for name, columns in (
                ("results", "grid position points laps time milliseconds fastestLap rank statusId:Int64"),
                ("driverStandings", "points position positionText wins"),
                ("lapTimes", "lap position time milliseconds"),
                ("pitStops", "stop lap time duration milliseconds"),
                ("qualifying", "constructorId:Int64 number position q1 q2 q3"),
            )
        ),
    ]


def test_a_date_in_the_question_finds_the_table_with_a_date_column() -> None:
    # "the 2008 Australian Grand Prix": the race is named by values the schema does not have, and by a
    # year, which only `races` holds (by a column's name here, by its type in a warehouse that keeps them).
    catalog = Catalog(races(), "formula_1")
    for question in (
        "How many drivers managed to finish the race in the 2008 Australian Grand Prix?",
        "Name the top 3 drivers and the points they scored in the 2017 Chinese Grand Prix.",
    ):
        assert "formula_1.races" in catalog.search(question, 3), catalog.search(question, 5)
    typed = [table("shop.orders", "order_id:Int64 total:Float64 placed:DateTime"), *races()[1:]]
    assert Catalog(typed, "shop").search("orders over 100 in 2019", 1) == ["shop.orders"]


def compute() -> list[Table]:
    """BEAVER's nova as it is shaped (its own columns): no comments, `instances` holds the VMs and is keyed
    by `instance_uuid` everywhere; the question says "VMs", a word only two of its 55 columns hold."""
    audit = "created_at:DateTime updated_at:DateTime deleted_at:DateTime id:Int64 deleted:Int64"
    instance = (
        "internal_id user_id project_id image_ref kernel_id ramdisk_id launch_index key_name key_data power_state "
        "vm_state memory_mb vcpus hostname host user_data reservation_id scheduled_at launched_at terminated_at "
        "display_name display_description availability_zone locked os_type launched_on instance_type_id vm_mode "
        "uuid architecture root_device_name access_ip_v4 access_ip_v6 config_drive task_state "
        "default_ephemeral_device default_swap_device progress auto_disk_config shutdown_terminate "
        "disable_terminate root_gb ephemeral_gb cell_name node locked_by cleaned ephemeral_key_uuid"
    )
    nodes = (
        "service_id vcpus memory_mb local_gb vcpus_used memory_mb_used local_gb_used hypervisor_type "
        "hypervisor_version cpu_info disk_available_least free_ram_mb free_disk_gb current_workload running_vms "
        "hypervisor_hostname host_ip supported_instances pci_stats metrics extra_resources stats numa_topology host"
    )
    tables = {
        "instances": instance,
        "instance_info_caches": "network_info instance_uuid",
        "security_groups": "name description user_id project_id",
        "security_group_instance_association": "security_group_id instance_uuid",
        "security_group_rules": "parent_group_id protocol from_port to_port cidr group_id",
        "security_group_default_rules": "protocol from_port to_port cidr",
        "volume_usage_cache": "volume_id tot_reads curr_reads instance_uuid project_id user_id availability_zone",
        "bw_usage_cache": "start_period last_refreshed bw_in bw_out mac uuid last_ctr_in last_ctr_out",
        "compute_nodes": nodes,
        "migrations": "source_compute dest_compute dest_host status instance_uuid source_node dest_node",
        "services": "host binary topic report_count disabled disabled_reason last_seen_up forced_down version",
    }
    return [table(f"nova.{name}", f"{audit} {columns}") for name, columns in tables.items()]


def test_the_table_two_first_hits_both_join_comes_right_after_them() -> None:
    question = (
        "Provide information (including info caches, and security groups) about VMs running on physical host star-76."
    )
    found = Catalog(compute(), "nova").search(question, 5)
    needed = {"security_groups", "instance_info_caches", "security_group_instance_association", "instances"}
    assert {f"nova.{name}" for name in needed} <= set(found), found  # `instances` joins the caches to the rest


def grand_prix() -> list[Table]:
    """BIRD's `formula_1` whole: constructors, seasons and the status lookup beside the races' tables."""
    return [
        *races(),
        table("formula_1.constructors", "constructorId:Int64 constructorRef name nationality url"),
        table("formula_1.constructorResults", "constructorResultsId:Int64 raceId:Int64 constructorId:Int64 points"),
        table("formula_1.constructorStandings", "constructorStandingsId:Int64 raceId:Int64 constructorId:Int64 points"),
        table("formula_1.seasons", "year:Int64 url"),
        table("formula_1.status", "statusId:Int64 status"),
    ]


def test_a_person_s_name_in_the_question_finds_the_table_of_named_people() -> None:
    # The schema has no word of "Lewis Hamilton": he is a row of the one table with a name in two parts.
    catalog = Catalog(grand_prix(), "formula_1")
    for question in (
        "What was the longest time that Lewis Hamilton had spent at a pit stop?",
        "What is the lap record set by Lewis Hamilton in a Formula_1 race?",
        "Which website should I go to if I want to know more about Anthony Davidson?",
    ):
        assert "formula_1.drivers" in catalog.search(question, 5), catalog.search(question, 5)
    # Capitalised words the warehouse has are its words, not a name.
    assert catalog.search("Longest Pit Stops and Lap Times", 5) == catalog.search("longest pit stops and lap times", 5)


def test_a_code_the_question_quotes_finds_the_column_of_that_name() -> None:
    catalog = Catalog(grand_prix(), "formula_1")
    for question in (
        "For the driver who had the Q2 time as 0:01:15 in race No. 347, where is he from?",
        "In the race No. 45, for the driver who had the Q3 time as 0:01:33, what is his abbreviated code?",
    ):
        found = catalog.search(question, 5)
        assert {"formula_1.qualifying", "formula_1.drivers"} <= set(found), found
