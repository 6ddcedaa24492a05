"""The admin WebUI (``cafleet server``): a Starlette app over the same database as the CLI.

Imported only by ``cafleet server`` and the tests, so no other command pays for
Starlette or uvicorn. See docs/webui.md.
"""
