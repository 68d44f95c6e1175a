"""A custom policy hook in about ten lines, working alongside the default policy plugin.

Register it inline (below), or as an entry point in your own distribution:

    [project.entry-points.tooldeck]
    my_policy = "custom_policy"
"""

from __future__ import annotations

from tooldeck_hookspecs import Decision, ErrorCode, hookimpl, nonblocking

ADMINS = {"alice"}


@hookimpl
@nonblocking  # it only looks at the arguments: safe to run on the event loop
def tooldeck_authorize_call(call, tool, session):
    """No writes to .env files; dangerous tools only for admins."""
    path = str(call.arguments.get("path", ""))
    if tool.name == "file_write" and (path.endswith(".env") or "/.env" in path):
        return Decision.deny("writing .env files is not allowed", code=ErrorCode.PATH_NOT_ALLOWED)
    if tool.security.level == "dangerous" and session.attributes.get("user") not in ADMINS:
        return Decision.deny("dangerous tools are for admins only")
    return None


if __name__ == "__main__":
    import sys

    import trio

    from tooldeck import Deck

    async def demo() -> None:
        async with Deck.load(plugins=[sys.modules[__name__]]) as deck:
            session = deck.session(workdir=".", grants={"filesystem"}, attributes={"user": "bob"})
            result = await session.call("file_write", {"path": ".env", "content": "X=1"})
            print(result.error.code, "-", result.error.message, f"(plugin {result.error.plugin})")

    trio.run(demo)
