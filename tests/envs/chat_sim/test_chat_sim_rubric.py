"""Rubric checks, persona files, scripted phrasing and the personalization score on fixed texts."""
from __future__ import annotations

import json

import pytest

from envs.chat_sim.persona import PersonaError, load_persona, parse_persona
from envs.chat_sim.problems import Problem, generated
from envs.chat_sim.responses import oracle_response
from envs.chat_sim.rubric import CHECKS, RubricItem, quarter_score
from envs.chat_sim.score import held_out_tasks, parse_boxed_score, personalization_score
from envs.chat_sim.users import ScriptedUser

CTX = {"answer": "1200", "student_answer": "14"}


def item(check: str, **params) -> RubricItem:
    return RubricItem(check, check, params, ("bad",), ("fix it",), "pref")


# (check, params, failing text, passing text)
CASES = [
    ("no_markdown_bold", {}, "The total is **12** apples.", "The total is 12 apples, 2*3 = 6."),
    ("no_markdown_bold", {}, "so __this__ one", "snake_case_name is fine"),
    ("no_headers", {}, "## Solution\nwe add them", "we add them, #1 priority"),
    ("no_lists", {}, "first\n- add 2\n- add 3", "we add 2 - then 3 - done"),
    ("no_lists", {}, "1. add 2\n2. add 3", "we add 2 and 3, about 1.5 each"),
    ("no_lists", {}, "Step 1: add the boxes", "in step one we add the boxes"),
    ("must_not_include_any", {"phrases": ["final answer", "\\boxed"]}, "**Final Answer**: 3", "the answer is 3"),
    ("must_not_include_any", {"phrases": ["final answer", "\\boxed"]}, "so $\\boxed{3}$", "so it's 3"),
    ("must_include_any", {"words": ["great", "well done"]}, "This is wrong.", "Well done, nearly there."),
    ("min_words", {"words": 5}, "too short", "this one has exactly five words"),
    ("max_words", {"words": 3}, "one two three four", "one two three"),
    ("max_words", {"words": 3}, "20/2 is 10 ok", "it's 10, ok"),
    ("casual_voice", {}, "Therefore, it's 5 so yes.", "ok so it's just 5, that's it."),
    ("casual_voice", {}, "The result equals five.", "it's 5, that's it."),
    ("must_be_correct", {"where": "last"}, "1200 is wrong, it's 1100", "first 100, then 1,200"),
    ("must_be_correct", {}, "the total is 1100", "the total is $1,200.00 overall"),
    ("mentions_student_answer", {}, "you wrote 15", "you wrote 14, close"),
    ("no_preamble", {"phrases": ["sure", "here are"]}, "Sure! Great work.", "Great work, sure thing."),
]


@pytest.mark.parametrize("check,params,bad,good", CASES)
def test_check_detects_and_repairs(check, params, bad, good):
    it = item(check, **params)
    assert not it.passes(bad, CTX)
    assert it.passes(good, CTX)
    assert it.passes(it.repair(bad, CTX), CTX), it.repair(bad, CTX)


def test_every_check_is_covered():
    assert {c[0] for c in CASES} == set(CHECKS)


def test_quarter_rounding():
    items = [item("min_words", words=i) for i in range(1, 8)]  # 7 items: pass those <= len
    assert quarter_score(items, "a b c d e", {}) == 0.75  # 5/7 = 0.71
    assert quarter_score(items, "a", {}) == 0.25  # 1/7 = 0.14 -> 0.25 (half-up: 0.57 quarters)
    assert quarter_score(items, "", {}) == 0.0
    assert quarter_score(items[:2], "a", {}) == 0.5
    assert quarter_score(items[:3], "a b", {}) == 0.75  # 2/3 -> 0.75
    assert quarter_score(items[:3], "a", {}) == 0.25  # 1/3 -> 0.25
    assert quarter_score(items, "a b c d e f g", {}) == 1.0


# ---- bundled personas: every item detected and phrased ------------------------------------
PROBLEM = Problem("p", "Q?", "10", ("33 minus 13 is 20.", "Half of 20 is 10."), "Answer: 8", "8")
STUDENT_OK = oracle_response(load_persona("student"), PROBLEM)
TEACHER_BODY = ("You wrote 8 and the correct answer is 10. You split the class into boys and girls, which "
                "was the right start, and you subtracted carefully. The only slip came when halving: half "
                "of twenty is ten, not eight. Try drawing twenty dots and circling half of them so you can "
                "see it, and check each step once more before you hand it in. ")
STUDENT_BROKEN = {
    "no_markdown_bold": STUDENT_OK.replace("Half of 20", "Half of **20**"),
    "no_headers": "## Working\n" + STUDENT_OK,
    "no_lists": "- " + STUDENT_OK,
    "no_final_answer": STUDENT_OK.replace("so the answer is 10", "final answer 10"),
    "casual_voice": STUDENT_OK + " Therefore it works.",
    "shows_steps": "it's 10, so yeah.",
    "correct": STUDENT_OK + " or maybe 12.",
}
TEACHER_BROKEN = {
    "detailed": "Great job! You wrote 8, the answer is 10. Keep it up!",
    "warm": TEACHER_BODY + "Keep it up!",
    "encouraging": TEACHER_BODY + "Great effort.",
    "specific_student": TEACHER_BODY.replace("You wrote 8 and the", "The") + "Great effort, keep it up!",
    "states_truth": TEACHER_BODY.replace("correct answer is 10", "correct answer differs").replace(
        "of twenty is ten, not eight", "was off") + "Great effort, keep it up!",
    "no_preamble": "Sure, here are my comments. " + TEACHER_BODY + "Great effort, keep it up!",
}


@pytest.mark.parametrize("persona,broken", [("student", STUDENT_BROKEN), ("teacher", TEACHER_BROKEN)])
def test_each_persona_item_detected_and_phrased(persona, broken):
    p = load_persona(persona)
    assert set(broken) == {it.name for it in p.rubric}
    user = ScriptedUser(p)
    for name, text in broken.items():
        it = next(i for i in p.rubric if i.name == name)
        r = user.reply(PROBLEM.context(), [], text, turn=0)
        assert r.failed == [name], (name, r.failed, text)
        assert r.verdict == -1 and not r.satisfied
        assert it.complaint[0] in r.content and it.directive[0] in r.content
        assert r.hint == it.directive[0]
    ok = user.reply(PROBLEM.context(), [], oracle_response(p, PROBLEM), turn=0)
    assert ok.satisfied and ok.verdict == 1 and ok.hint == "" and p.done_phrase in ok.content


def test_phrasing_rotates_with_turns():
    p = load_persona("student")
    bold = next(i for i in p.rubric if i.name == "no_markdown_bold")
    user = ScriptedUser(p)
    text = STUDENT_BROKEN["no_markdown_bold"]
    assert bold.complaint[0] in user.reply(PROBLEM.context(), [], text, 0).content
    assert bold.complaint[1] in user.reply(PROBLEM.context(), [], text, 1).content


def test_oracle_passes_every_bundled_persona():
    from envs.chat_sim.persona import bundled_personas
    probs = generated("train")[:40] + generated("heldout")[:20]
    for name in bundled_personas():
        p = load_persona(name)
        for prob in probs:
            assert quarter_score(list(p.rubric), oracle_response(p, prob), prob.context()) == 1.0, (name, prob)


# ---- personalization score --------------------------------------------------------------
AI_LOOKING = "## Solution\n1. **33 - 13 = 20**\n2. 20 / 2 = 10\n\n**Final answer:** 10"


def test_personalization_score_rules_on_fixed_texts():
    assert personalization_score("student", PROBLEM, STUDENT_OK) == 1.0
    # fails bold, headers, lists, final answer, casual: 2/7 -> 0.25
    assert personalization_score("student", PROBLEM, AI_LOOKING) == 0.25
    assert personalization_score("student_no_bold", PROBLEM, AI_LOOKING) == 0.0
    assert personalization_score("student_no_bold", PROBLEM, "20 then 10") == 1.0
    # teacher: too short, no warmth, no encouragement; mentions 8 and 10, no preamble: 3/6 -> 0.5
    assert personalization_score("teacher", PROBLEM, "8 is wrong; it is 10.") == 0.5


def test_personalization_score_llm_judge():
    seen = []

    def judge(messages):
        seen.append(messages)
        return "The reply has bold text. \\boxed{0.25} no wait \\boxed{0.5}"

    assert personalization_score("student", PROBLEM, AI_LOOKING, complete=judge) == 0.5
    assert "No bold text" in seen[0][-1]["content"] and AI_LOOKING in seen[0][-1]["content"]
    replies = iter(["\\boxed{1}", "no score here", "\\boxed{0.5}"])
    assert personalization_score("student", PROBLEM, STUDENT_OK, complete=lambda m: next(replies), votes=3) == 0.75

    def broken(messages):
        raise TimeoutError("judge down")

    # every vote invalid -> the rules score
    assert personalization_score("student", PROBLEM, AI_LOOKING, complete=broken, votes=2) == 0.25
    assert personalization_score("student", PROBLEM, AI_LOOKING, complete=lambda m: "\\boxed{0.6}") == 0.25
    assert parse_boxed_score(None) is None and parse_boxed_score("\\boxed{0.75}") == 0.75


def test_held_out_tasks_are_disjoint_from_training():
    train = {p.question for p in generated("train")}
    tasks = held_out_tasks()
    assert len(tasks) == 2 * len(generated("heldout")) > 0
    assert all(t.meta["problem"].question not in train for t in tasks)
    assert held_out_tasks() == tasks  # fixed
    for t in tasks[:10] + tasks[-10:]:
        assert personalization_score(t.meta["persona"], t.meta["problem"], t.oracle[0]) == 1.0
        assert t.meta["problem"].question in t.prompt


# ---- user-written persona files -----------------------------------------------------------
USER_PERSONA = {
    "name": "pirate_fan",
    "role": "student",
    "description": "You love pirates.",
    "first_message": "Ahoy, solve this: {question}",
    "done_phrase": "ARR_DONE",
    "satisfied_message": "Shiver me timbers, ARR_DONE",
    "rubric": [
        {"name": "pirate", "check": "must_include_any", "words": ["arr", "matey"],
         "complaint": "Not piratey enough.", "directive": "Talk like a pirate, matey."},
        {"name": "no_markdown_bold", "complaint": "No bold!", "directive": "Drop the bold."},
    ],
}


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_user_written_persona_file(tmp_path, fmt):
    import yaml

    path = tmp_path / f"mine.{fmt}"
    path.write_text(json.dumps(USER_PERSONA) if fmt == "json" else yaml.safe_dump(USER_PERSONA))
    p = load_persona(path)
    assert p.name == "pirate_fan" and [i.name for i in p.rubric] == ["pirate", "no_markdown_bold"]
    r = ScriptedUser(p).reply(PROBLEM.context(), [], "**10**", 0)
    assert r.failed == ["pirate", "no_markdown_bold"]
    assert r.content == "Not piratey enough. No bold! Talk like a pirate, matey. Drop the bold."
    assert personalization_score(path, PROBLEM, "arr, 10") == 1.0
    assert ScriptedUser(p).reply(PROBLEM.context(), [], oracle_response(p, PROBLEM), 0).satisfied


@pytest.mark.parametrize("change,msg", [
    ({"role": "pirate"}, "role must be one of"),
    ({"rubric": []}, "non-empty list"),
    ({"rubric": [{"name": "x", "check": "nope", "complaint": "a", "directive": "b"}]}, "unknown check 'nope'"),
    ({"rubric": [{"name": "no_lists", "complaint": "a"}]}, "missing 'directive'"),
    ({"first_message": "Solve {problem}"}, "unknown field(s) ['problem']"),
    ({"satisfied_message": "thanks"}, "must contain done_phrase"),
    ({"rubric": [{"name": "no_lists", "complaint": "a", "directive": []}]}, "non-empty string or list"),
])
def test_bad_persona_gets_a_clear_message(change, msg):
    with pytest.raises(PersonaError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_persona(USER_PERSONA | change)


def test_persona_file_errors(tmp_path):
    with pytest.raises(PersonaError, match="no bundled persona"):
        load_persona("nobody")
    with pytest.raises(PersonaError, match="cannot read"):
        load_persona(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rubric: [unclosed")
    with pytest.raises(PersonaError, match="does not parse"):
        load_persona(bad)
    bad.write_text("- a list")
    with pytest.raises(PersonaError, match="holds a mapping"):
        load_persona(bad)
