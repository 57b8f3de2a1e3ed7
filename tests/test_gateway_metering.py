"""How the gateway reads usage and prices it: the price formula by hand, and the SSE reader fed
a real stream cut at every byte boundary (a proxy or a slow network splits events anywhere)."""

from __future__ import annotations

import json

import pytest

from assay.models.gateway.protocols import ChatCompletions, ChatStreamMeter, chat_usage
from assay.models.prices import ModelPrice, Usage, call_cost, price_table


def test_cost_formula_by_hand() -> None:
    price = ModelPrice(input=0.30, cached_input=0.03, output=1.20)
    usage = Usage(input=10_000, cached_input=4_000, output=500, reasoning=200)
    # 6,000 uncached at 0.30 + 4,000 cached at 0.03 + 500 output at 1.20 (reasoning is part
    # of the output, not added again), per million
    assert call_cost(usage, price) == pytest.approx((6000 * 0.30 + 4000 * 0.03 + 500 * 1.20)
                                                    / 1e6)
    assert usage.tokens == 10_500


def test_unknown_stays_unknown() -> None:
    price = ModelPrice(input=1.0, output=2.0)
    assert call_cost(None, price) is None
    assert call_cost(Usage(input=5), price) is None  # no output figure: no cost, not a zero
    assert call_cost(Usage(input=5, output=5), None) is None  # no price
    # no cached price: the provider gives no discount, cached tokens bill as input
    assert call_cost(Usage(input=1000, cached_input=600, output=0), price) == \
        pytest.approx(1000 / 1e6)
    # no cached figure reported: everything at the input price
    assert call_cost(Usage(input=1000, output=0), ModelPrice(1.0, 2.0, 0.1)) == \
        pytest.approx(1000 / 1e6)


def test_price_table_shape() -> None:
    table = price_table({"m": {"input": 0.3, "cached_input": 0.03, "output": 1.2}})
    assert table["m"] == ModelPrice(input=0.3, output=1.2, cached_input=0.03)
    with pytest.raises(ValueError, match="needs input and output"):
        price_table({"m": {"input": 1.0}})
    with pytest.raises(ValueError, match="needs input and output"):
        price_table({"m": {"input": 1.0, "output": 1.0, "cache": 0.1}})
    with pytest.raises(ValueError, match=">= 0"):
        ModelPrice(input=-1.0, output=1.0)


def test_chat_usage_fields_kept_apart() -> None:
    usage = chat_usage({"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
                        "prompt_tokens_details": {"cached_tokens": 30},
                        "completion_tokens_details": {"reasoning_tokens": 25}})
    assert usage == Usage(input=100, cached_input=30, output=40, reasoning=25)
    assert chat_usage({"prompt_tokens": 7, "completion_tokens": 3}) == Usage(7, None, 3, None)
    assert chat_usage(None) is None


def _stream(usage: bool, crlf: bool = False) -> bytes:
    end = b"\r\n\r\n" if crlf else b"\n\n"
    events = [
        {"model": "served-1", "choices": [{"index": 0, "delta": {"role": "assistant"},
                                           "finish_reason": None}]},
        {"model": "served-1", "choices": [{"index": 0, "delta": {"content": "hé"},
                                           "finish_reason": None}]},
        {"model": "served-1", "choices": [{"index": 0, "delta": {},
                                           "finish_reason": "stop"}]},
    ]
    if usage:
        events.append({"model": "served-1", "choices": [],
                       "usage": {"prompt_tokens": 9, "completion_tokens": 2}})
    out = b"".join(b"data: " + json.dumps(e, ensure_ascii=False).encode() + end
                   for e in events)
    return out + b"data: [DONE]" + end


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("hide", [False, True])
def test_stream_meter_at_every_split(crlf: bool, hide: bool) -> None:
    raw = _stream(usage=True, crlf=crlf)
    for cut in range(1, len(raw)):
        meter = ChatStreamMeter(hide_usage_event=hide)
        passed = meter.feed(raw[:cut]) + meter.feed(raw[cut:]) + meter.flush()
        outcome = meter.outcome()
        assert outcome.usage == Usage(input=9, output=2)
        assert (outcome.model_served, outcome.finish_reason, outcome.step) == \
            ("served-1", "stop", True)
        assert meter.done
        if hide:  # exactly the usage event is kept from the agent, nothing else
            assert passed == _stream(usage=False, crlf=crlf)
        else:
            assert passed == raw


def test_prepare_pins_model_and_asks_for_usage() -> None:
    chat = ChatCompletions()
    raw = json.dumps({"model": "agent-choice", "stream": True, "messages": []}).encode()
    prepared = chat.prepare(raw, "pinned", stream_usage=True)
    body = json.loads(prepared.body)
    assert body["model"] == "pinned" and body["stream_options"] == {"include_usage": True}
    assert prepared.model_asked == "agent-choice" and prepared.hide_usage_event
    untouched = json.dumps({"model": "pinned", "messages": []}).encode()
    assert chat.prepare(untouched, "pinned", stream_usage=True).body is untouched
    no_usage = chat.prepare(raw, "pinned", stream_usage=False)
    assert "stream_options" not in json.loads(no_usage.body)
    garbage = chat.prepare(b"{not json", "pinned", stream_usage=True)
    assert garbage.body == b"{not json" and garbage.model_asked is None
