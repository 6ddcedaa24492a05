"""The spawn prompt: the Director's prompt with placeholders filled in, followed by the
identity lines a member needs to talk to the broker.

Placeholders: ``{fleet_id}``, ``{member_id}``, ``{director_member_id}``,
``{coding_agent}``; ``{{`` and ``}}`` are literal braces; anything else in braces is a
usage error, found before any side effect by :func:`check_template`.
"""

from __future__ import annotations

from cafleet.errors import UsageError

PLACEHOLDERS = ("fleet_id", "member_id", "director_member_id", "coding_agent")


def _parse(template: str) -> list[tuple[str, str]]:
    """Split into ("text", s) and ("field", name) parts."""
    parts: list[tuple[str, str]] = []
    text: list[str] = []
    i, n = 0, len(template)
    while i < n:
        ch = template[i]
        if ch == "{":
            if template.startswith("{{", i):
                text.append("{")
                i += 2
                continue
            end = template.find("}", i + 1)
            if end < 0:
                raise UsageError("the prompt has an unclosed '{'; write {{ for a literal brace.")
            name = template[i + 1 : end]
            if name not in PLACEHOLDERS:
                shown = name if len(name) <= 30 else name[:30] + "…"
                raise UsageError(
                    f"unknown placeholder {{{shown}}} in the prompt; use {', '.join('{' + p + '}' for p in PLACEHOLDERS)} "
                    "or {{ }} for literal braces."
                )
            if text:
                parts.append(("text", "".join(text)))
                text = []
            parts.append(("field", name))
            i = end + 1
        elif ch == "}":
            if template.startswith("}}", i):
                text.append("}")
                i += 2
                continue
            raise UsageError("the prompt has a single '}'; write }} for a literal brace.")
        else:
            text.append(ch)
            i += 1
    if text:
        parts.append(("text", "".join(text)))
    return parts


def check_template(template: str) -> None:
    _parse(template)


def render_spawn_prompt(
    template: str, *, fleet_id: int, member_id: int, director_member_id: int, coding_agent: str
) -> str:
    values = {
        "fleet_id": str(fleet_id),
        "member_id": str(member_id),
        "director_member_id": str(director_member_id),
        "coding_agent": coding_agent,
    }
    body = "".join(value if kind == "text" else values[value] for kind, value in _parse(template))
    identity = "\n".join(
        (
            "cafleet identity:",
            f"- fleet id: {fleet_id}",
            f"- your member id: {member_id}",
            f"- Director member id: {director_member_id}",
            f"- messages wake you as `[cafleet msg ID from SENDER TIME]` lines; read them with "
            f"`cafleet message poll {member_id}` and the full body with `cafleet message show ID`",
            "- acknowledge each message once handled: `cafleet message ack ID`",
            f'- reply: `cafleet message send --from-member-id {member_id} --to-member-id {director_member_id} "TEXT"`',
            "- a send that printed a message id is stored, even if the recipient was not woken: never resend it",
        )
    )
    return body.rstrip("\n") + "\n\n" + identity
