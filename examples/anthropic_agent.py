"""A minimal agent loop on Anthropic messages with tooldeck dealing the tools.

Runs when ANTHROPIC_API_KEY is set (and `pip install anthropic`); otherwise it says so and exits.
This one is async on trio, the way tooldeck runs natively.

    python examples/anthropic_agent.py "read pyproject.toml and tell me the dependencies"
"""

from __future__ import annotations

import os
import sys

import trio

from tooldeck import Deck

MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")


async def main(task: str) -> int:
    if not os.environ.get("ANTHROPIC_API_KEY"):
        print("set ANTHROPIC_API_KEY to run this example (no network call was made)")
        return 0
    from anthropic import Anthropic

    client = Anthropic()
    messages: list[dict] = [{"role": "user", "content": task}]

    async def confirm(request) -> bool:
        # Dangerous calls pause here: ask the person at the terminal.
        answer = await trio.to_thread.run_sync(
            input, f"allow {request.tool.name} {dict(request.call.arguments)}? [y/N] "
        )
        return answer.strip().lower() == "y"

    async with Deck.load() as deck:
        session = deck.session(workdir=".", grants={"filesystem"}, confirm=confirm)
        hand = await session.select(task)
        for _turn in range(8):
            response = await trio.to_thread.run_sync(
                lambda: client.messages.create(
                    model=MODEL, max_tokens=1024, messages=messages, tools=hand.export("anthropic")
                )
            )
            messages.append(
                {"role": "assistant", "content": [b.model_dump() for b in response.content]}
            )
            if response.stop_reason != "tool_use":
                print("".join(b.text for b in response.content if b.type == "text"))
                return 0
            messages.extend(await session.run_tool_calls("anthropic", response))
    return 1


if __name__ == "__main__":
    sys.exit(trio.run(main, " ".join(sys.argv[1:]) or "What files are in this folder?"))
