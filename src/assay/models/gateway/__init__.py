"""The per-run model gateway: scoped tokens, budgets, forwarding, metering.

Modules (imported by their full names; this file imports nothing):

- ``anthropic``: Anthropic Messages at the gateway (``POST /v1/messages``, plain and SSE, and
  ``POST /v1/messages/count_tokens``): Claude Code speaks it (``anthropic_usage``,
  ``AnthropicMessages``, ``AnthropicStreamMeter``, ``AnthropicCountTokens``)
- ``book``: The gateway's book of attempts: scoped tokens, revocation, connection counts and
  spending (``Entry``, ``Caller``, ``Refusal``, ``AttemptBook``, ``new_token``)
- ``channel``: An attempt's own way into the gateway: one listening socket, accepted at a
  bounded pace (``Channel``, ``remove_socket``)
- ``budget``: Per-attempt limits and the running totals they are checked against (``Limits``,
  ``AttemptUsage``, ``Totals``, ``Budget``)
- ``http``: HTTP/1.1 for the gateway, both sides, parsed by llhttp (``httptools``) on asyncio
  streams (``BadRequest``, ``ServerLimits``, ``Request``, ``AgentConnection``, ...)
- ``protocols``: What the gateway knows about each model API it meters: the one place a protocol
  lives (``chat_usage``, ``ChatCompletions``, ``ChatStreamMeter``, ``family_paths``)
- ``responses``: The OpenAI Responses API at the gateway (``POST /v1/responses``, plain and
  SSE): Codex speaks nothing else (``responses_usage``, ``ResponsesAPI``,
  ``ResponsesStreamMeter``)
- ``service``: The per-run model gateway: the only way an agent under test reaches a model
  (``Secret``, ``Upstream``, ``Gateway``)
- ``transcript``: The model side of an attempt as it happened: what each call sent and what came
  back (``canonical``, ``Redactor``, ``TranscriptWriter``, ``plain_response``, ...)
- ``wire``: What every metered model API has in common at the gateway: the shapes of a prepared
  request and of what an answer said, an SSE event splitter, and the two error bodies agents
  understand (``Outcome``, ``Prepared``, ``StreamMeter``, ``WireProtocol``, ...)
"""
