def main() -> None:
    raise SystemExit("assay: CLI not built yet")
