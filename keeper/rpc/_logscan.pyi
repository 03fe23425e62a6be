from typing import Any

def scan(
    body: bytes,
    expected_id: int,
    log_type: type[Any],
    wanted: set[str] | None,
    from_block: int,
    to_block: int,
    want_hash: str | None,
    /,
) -> tuple[list[Any], dict[int, str | None]] | None: ...
