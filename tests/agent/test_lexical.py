"""The words both sides of a search are cut into, and BM25 over weighted fields."""

from __future__ import annotations

from agent.lexical import LexicalIndex, codes, derived, terms


def test_every_form_of_a_word_is_one_term() -> None:
    assert terms("prices priced price") == ("pric", "pric", "pric")
    assert terms("customers customer") == ("customer", "customer")
    assert terms("shipped shipping ship") == ("ship", "ship", "ship")
    assert terms("business address") == ("business", "address")
    assert terms("rulings ruling ratings rating") == ("rul", "rul", "rat", "rat")  # card_games' `rulings`
    assert terms("VMs IPs vm_state ip STATUS") == ("vm", "ip", "vm", "stat", "ip", "status")  # an acronym's plural


def test_warehouse_names_read_as_words() -> None:
    assert terms("fct_cust_txn") == ("fct", "customer", "transaction")
    assert terms("orderLinesDaily") == ("order", "lin", "daily")
    assert terms("How many of the orders were there?") == ("order",)  # stopwords dropped


def test_a_name_weighs_more_than_a_sampled_value_and_ties_are_stable() -> None:
    index = LexicalIndex(
        [
            ("shop.refunds", [("refunds", 3.0), ("Money returned to customers", 2.0)]),
            ("shop.orders", [("orders", 3.0), ("refund", 0.5)]),
            ("shop.a", [("stock", 1.0)]),
            ("shop.b", [("stock", 1.0)]),
        ]
    )
    assert [hit.key for hit in index.search("refunds to customers")] == ["shop.refunds", "shop.orders"]
    assert [hit.key for hit in index.search("stock")] == ["shop.a", "shop.b"]
    assert index.search("nothing like it") == []


def test_words_of_any_script_are_terms_and_a_status_is_its_plural() -> None:
    assert terms("Zürich Москва") == ("zürich", "москва")
    assert terms("order statuses") == terms("order status")


def test_two_words_of_a_question_find_the_name_that_writes_them_as_one() -> None:
    # Spider's network_1: "How many high schoolers are there?" needs `Highschooler`, not the table
    # that merely has a `high` column.
    index = LexicalIndex(
        [
            ("network_1.Highschooler", [("Highschooler", 3.0), ("ID", 1.0), ("name", 1.0), ("grade", 1.0)]),
            ("network_1.Likes", [("Likes", 3.0), ("student_id", 1.0), ("liked_id", 1.0)]),
            ("scores.results", [("results", 3.0), ("high", 1.0), ("low", 1.0)]),
        ]
    )
    assert index.search("How many high schoolers are there?")[0].key == "network_1.Highschooler"
    assert index.search("super power") == []  # a compound the index lacks adds nothing


def test_a_word_finds_the_other_words_of_its_stem_in_the_index() -> None:
    # BIRD's superhero: "published by Marvel Comics" needs `publisher`; "migrated" needs `migrations`.
    index = LexicalIndex(
        [
            ("superhero.publisher", [("publisher", 3.0), ("id", 1.0), ("publisher_name", 1.0)]),
            ("superhero.superhero", [("superhero", 3.0), ("superhero_name", 1.0), ("height_cm", 1.0)]),
            ("superhero.colour", [("colour", 3.0), ("id", 1.0)]),
            ("nova.migrations", [("migrations", 3.0), ("source_compute", 1.0)]),
        ]
    )
    assert [hit.key for hit in index.search("How many superheroes are published by Marvel?")] == [
        "superhero.superhero",
        "superhero.publisher",
    ]
    assert index.search("VMs that migrated")[0].key == "nova.migrations"
    assert index.search("Which publishers are there?")[0].key == "superhero.publisher"
    # the question's own word counts for more than a derived one
    both = LexicalIndex([("a.creator", [("creator", 1.0)]), ("a.created", [("created", 1.0)])])
    assert [hit.key for hit in both.search("created")] == ["a.created", "a.creator"]


def test_derived_forms_are_only_those_of_the_same_stem() -> None:
    assert set(derived("publish")) >= {"publisher", "publishor"}
    assert "migration" in derived("migrat") and "winner" in derived("win")
    assert "publish" in derived("publisher")
    assert "us" not in derived("user") and "ord" not in derived("order")  # too short a stem to be one


def test_a_tag_is_found_only_when_implied_and_makes_no_document_longer() -> None:
    # `~date`: what a table with a date column is known to hold, though no word of a question spells it.
    plain = [("a.orders", [("orders", 3.0), ("total", 1.0)]), ("a.refunds", [("refunds", 3.0), ("total", 1.0)])]
    tagged = [plain[0], ("a.refunds", [*plain[1][1], (("~date",), 1.0)])]
    before, after = LexicalIndex(plain), LexicalIndex(tagged)
    assert after.search("total") == before.search("total")  # the same scores: the tag adds no length
    assert [hit.key for hit in after.search("total", implied={"~date": 1.0})] == ["a.refunds", "a.orders"]
    assert after.search("~date") == []  # no text spells a tag


def test_a_code_of_a_letter_and_digits_is_found_whole() -> None:
    # BIRD's formula_1: "Q1 result" is `qualifying.q1`; cut into `q` and `1`, it said nothing.
    assert codes("Q1 result, A11 and B365H in the 3rd lap of the 1990s, host blitz1") == ("q1", "a11", "b365h")
    index = LexicalIndex(
        [
            ("f1.qualifying", [("qualifying", 3.0), ("q1", 1.0), ("q2", 1.0), ("position", 1.0)]),
            ("f1.results", [("results", 3.0), ("position", 1.0), ("points", 1.0)]),
        ]
    )
    assert [hit.key for hit in index.search("What's his Q2 position?")] == ["f1.qualifying", "f1.results"]
    team = ("m.team", [("team", 3.0), ("team_name", 1.0)])
    wide = LexicalIndex([("m.match", [("match", 3.0), *((f"Q{n}", 1.0) for n in range(1, 10))]), team])
    narrow = LexicalIndex([("m.match", [("match", 3.0), ("Q1", 1.0)]), team])
    assert wide.search("match team") == narrow.search("match team")  # codes make a document no longer
