"""Write ``src/tooldeck_schema/_metaschema_code.py``: the plain Draft 7 metaschema validator
that fastjsonschema generates, so that a new process imports it instead of compiling it.

Run it after changing ``_metaschema.py`` or upgrading fastjsonschema (the schema tests fail
while the shipped copy is stale; meanwhile the deck compiles the validator at start-up).
"""

from __future__ import annotations

from pathlib import Path

from tooldeck_schema._compile import metaschema_code

TARGET = Path(__file__).resolve().parents[1] / "src" / "tooldeck_schema" / "_metaschema_code.py"

if __name__ == "__main__":
    TARGET.write_text(metaschema_code(), encoding="utf-8")
    print(f"wrote {TARGET}")
