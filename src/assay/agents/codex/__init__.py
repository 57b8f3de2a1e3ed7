"""The Codex CLI adapter and its stream reader.

Modules (imported by their full names; this file imports nothing):

- ``adapter``: The OpenAI Codex CLI adapter: ``codex exec --json`` headless, its JSONL read into
  the record (``codex_config``, ``default_bin``, ``Codex``)
- ``stream``: Reading ``codex exec --json`` stdout: the JSONL events of Codex CLI 0.171.0
  (``CodexReading``, ``read_codex_stream``, ``usage_check``)
"""
