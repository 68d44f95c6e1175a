"""A minimal agent loop on OpenAI chat completions with tooldeck dealing the tools.

Runs when OPENAI_API_KEY is set (and `pip install openai`); otherwise it says so and exits.

    python examples/openai_agent.py "list the files here and summarize the README"
"""

from __future__ import annotations

import os
import sys

from tooldeck import Deck
from tooldeck.portal import DeckPortal

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")


def main(task: str) -> int:
    if not os.environ.get("OPENAI_API_KEY"):
        print("set OPENAI_API_KEY to run this example (no network call was made)")
        return 0
    from openai import OpenAI

    client = OpenAI()
    messages: list[dict] = [{"role": "user", "content": task}]
    # The portal keeps tooldeck's trio loop in a background thread: plain blocking code here.
    with DeckPortal(Deck.load()) as portal:
        session = portal.session(workdir=".", grants={"filesystem"})
        hand = session.select(task)  # the 10-15 tools that matter for this task
        for _turn in range(8):
            response = client.chat.completions.create(
                model=MODEL, messages=messages, tools=hand.export("openai")
            )
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                print(message.content)
                return 0
            # Every call: validated, authorized, cached, rate-limited, sandboxed; parallel calls
            # run concurrently; errors come back as messages the model can act on.
            messages.extend(session.run_tool_calls("openai", response))
    return 1


if __name__ == "__main__":
    sys.exit(main(" ".join(sys.argv[1:]) or "What files are in this folder?"))
