"""The scripted judge server itself: the script's keys, tries and order-dependent answers are
what its docstring promises (other tests, the pairwise ones too, lean on them)."""

from __future__ import annotations

import json

import httpx
from support.judge_server import JudgeServer, by_position, tries_of, verdict
from support.scripted_server import Garbage


def ask(server: JudgeServer, material: str, *, retry: bool = False) -> httpx.Response:
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": material}]
    if retry:
        messages += [{"role": "assistant", "content": "bad"},
                     {"role": "user", "content": "again"}]
    return httpx.post(f"{server.base_url}/chat/completions", timeout=10,
                      json={"model": "judge", "messages": messages})


def content(response: httpx.Response) -> str:
    return response.json()["choices"][0]["message"]["content"]


def test_script_keys_tries_and_reply_kinds() -> None:
    good = verdict({"c": 1}, ["answer.txt:1"], {"c": "fine"})
    assert good == {"criteria": {"c": {"score": 1, "citations": ["answer.txt:1"],
                                       "reason": "fine"}}}
    script = {"ONE": [good, "second try"], "RAW": "{not json", "ODD": Garbage(),
              "CALL": lambda request: {"tries": tries_of(request)}}
    with JudgeServer(script, model="served-x") as server:
        first = ask(server, "material ONE here")
        assert json.loads(content(first)) == good
        assert first.json()["model"] == "served-x"
        assert content(ask(server, "material ONE here", retry=True)) == "second try"
        assert content(ask(server, "xx RAW")) == "{not json"
        assert ask(server, "ODD").text.startswith("<html>")
        assert json.loads(content(ask(server, "CALL", retry=True))) == {"tries": 1}
        missing = ask(server, "nothing scripted")
        assert missing.status_code == 500 and "no script key" in missing.text
        both = ask(server, "ONE and RAW")
        assert both.status_code == 500 and "several script keys" in both.text
        assert [r.case_input for r in server.requests_matching("ONE")] == \
            ["material ONE here", "material ONE here", "ONE and RAW"]


def test_by_position_answers_for_whatever_is_shown_first() -> None:
    biased = by_position(["ALPHA", "BETA"], {"ALPHA": {"winner": "A"},
                                             "BETA": {"winner": "B"}})
    with JudgeServer({"PAIR": biased}) as server:
        assert json.loads(content(ask(server, "PAIR ALPHA then BETA"))) == {"winner": "A"}
        assert json.loads(content(ask(server, "PAIR BETA then ALPHA"))) == {"winner": "B"}
        assert ask(server, "PAIR neither").status_code == 500
