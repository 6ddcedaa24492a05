"""Members' own git worktrees (docs/worktrees.md): planned and checked before the member is
registered, added (recorded first) before its pane starts, reviewed with ``member diff``,
and removed at deletion only when nothing would be lost.

Every git command runs with the caller's environment (so ``GIT_CONFIG_GLOBAL``, ``HOME``
and the like are the user's own choice), never a shell, and with prompts off.

What "nothing lost" means, checked after the member's pane is closed (so its agent can no
longer write): the worktree has no change ``git status`` reports (modified, staged or
untracked files; ignored files are not counted, as ``git worktree remove`` does not count
them), and neither its branch nor the worktree's ``HEAD`` has a commit that is not on its
base (the commit it started from, or the base branch as it is now) or on a remote-tracking
branch. Otherwise both are kept and the reason is said in one line.
"""

from __future__ import annotations

import os

from cafleet.broker import worktrees as records
from cafleet.errors import CafleetError, UsageError


class Plan:
    """What ``git worktree add`` will be given for a new member."""

    __slots__ = ("repo", "cwd", "branch", "base", "base_commit", "root", "explicit_branch")

    def __init__(self, repo, cwd, branch, base, base_commit, root, explicit_branch) -> None:
        self.repo = repo  # the main worktree's folder (where git commands for this repository run)
        self.cwd = cwd
        self.branch = branch
        self.base = base
        self.base_commit = base_commit
        self.root = root  # the folder under the worktree dir that holds this repository's worktrees
        self.explicit_branch = explicit_branch


def git(environ, cwd: str, *args: str, input: bytes | None = None) -> tuple[int, str, str]:
    import subprocess

    env = dict(environ)
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=env, input=input, capture_output=True, timeout=120, check=False
        )
    except FileNotFoundError:
        raise CafleetError("git is not installed (not on PATH); install git to use --worktree.") from None
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CafleetError(f"git {args[0]} could not run in {cwd} ({error}).") from None
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def _reason(err: str, code: int) -> str:
    from cafleet.mux import first_line

    return first_line(err) or f"exit status {code}"


def slug(name: str) -> str:
    """A member name as a part of a branch name and a folder name."""
    kept = "".join(c if (c.isascii() and (c.isalnum() or c in "._-")) else "-" for c in name)
    kept = "-".join(part for part in kept.split("-") if part).strip(".")
    return (kept[:40].rstrip(".-") or "member").replace("..", ".")


def plan(environ, cwd: str, fleet_id: int, branch: str | None, base: str | None) -> Plan:
    """Check, before anything is written, that ``cwd`` is inside a work tree of a git
    repository, that the base names a commit and that a chosen branch is free."""
    import hashlib

    from cafleet import config

    code, out, err = git(environ, cwd, "rev-parse", "--show-toplevel", "--git-common-dir")
    lines = out.splitlines()
    if code != 0 or len(lines) < 2 or not lines[0]:
        raise CafleetError(
            f"--worktree needs the current directory to be inside a git repository's work tree, and {cwd} is not "
            f"({_reason(err, code)}); cd into the repository, or leave out --worktree."
        )
    common = os.path.realpath(os.path.join(cwd, lines[1]))
    repo = os.path.dirname(common) if os.path.basename(common) == ".git" else common
    given = base or "HEAD"
    code, out, err = git(environ, cwd, "rev-parse", "--verify", "--quiet", "--end-of-options", given + "^{commit}")
    if code != 0 or not out.strip():
        raise UsageError(f"--base {given} names no commit of the repository at {repo}; give a branch, tag or commit.")
    base_commit = out.strip()
    if base is None:  # the Director's HEAD: its branch when it is on one, so "on its base" follows that branch
        code, out, _ = git(environ, cwd, "symbolic-ref", "--quiet", "--short", "HEAD")
        given = out.strip() if code == 0 and out.strip() else base_commit
    if branch is not None:
        check_branch(environ, repo, branch)
    parent = config.worktree_dir(environ)
    top = os.path.realpath(lines[0])
    for inside in {top, repo}:
        if parent == inside or parent.startswith(inside.rstrip("/") + "/"):
            raise CafleetError(
                f"the worktree folder {parent} is inside the repository at {inside}, where every worktree would show "
                "in its `git status`; set CAFLEET_WORKTREE_DIR to a folder outside it."
            )
    key = hashlib.sha256(repo.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    root = os.path.join(parent, f"{slug(os.path.basename(repo))}-{key}")
    return Plan(repo, cwd, branch, given, base_commit, root, branch is not None)


def check_branch(environ, repo: str, branch: str) -> None:
    code, _, _ = git(environ, repo, "check-ref-format", "--branch", branch)
    if code != 0 or branch.startswith("-"):
        raise UsageError(f"--branch {branch!r} is not a valid git branch name.")
    code, _, _ = git(environ, repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")
    if code == 0:
        raise CafleetError(
            f"branch {branch} already exists in the repository at {repo}; choose another --branch "
            "(a member's worktree always starts on a new branch)."
        )


def member_path(plan_: Plan, fleet_id: int, member_id: int, name: str) -> str:
    return os.path.join(plan_.root, f"f{fleet_id}-m{member_id}-{slug(name)}")


def default_branch(fleet_id: int, member_id: int, name: str) -> str:
    return f"cafleet/f{fleet_id}-m{member_id}-{slug(name)}"


def add(store, environ, plan_: Plan, fleet_id: int, member_id: int, name: str) -> dict:
    """Record, then add, the member's worktree on its new branch; the row is ``ready``
    once git has made it. Raises with nothing left in git when git refuses."""
    from cafleet.faults import pause_point

    branch = plan_.branch or default_branch(fleet_id, member_id, name)
    if not plan_.explicit_branch:
        check_branch(environ, plan_.repo, branch)
    path = member_path(plan_, fleet_id, member_id, name)
    if os.path.lexists(path):
        raise CafleetError(f"the worktree path {path} already exists; move it away, or set CAFLEET_WORKTREE_DIR.")
    records.record(
        store, member_id, repo=plan_.repo, path=path, branch=branch, base=plan_.base, base_commit=plan_.base_commit
    )
    pause_point("create.worktree_recorded")
    os.makedirs(plan_.root, exist_ok=True)
    code, _, err = git(environ, plan_.repo, "worktree", "add", "--quiet", "-b", branch, path, plan_.base_commit)
    if code != 0:
        records.set_status(store, member_id, records.REMOVED)  # git made nothing: the row only keeps the path
        raise CafleetError(f"git could not add the worktree {path} ({_reason(err, code)}).")
    pause_point("create.worktree_added")
    records.set_status(store, member_id, records.READY)
    return {"path": path, "branch": branch, "base": plan_.base, "base_commit": plan_.base_commit}


def known_paths(environ, repo: str) -> set[str] | None:
    """The worktree paths git knows for ``repo`` (None: git could not say)."""
    code, out, _ = git(environ, repo, "worktree", "list", "--porcelain")
    if code != 0:
        return None
    return {os.path.realpath(line[9:]) for line in out.splitlines() if line.startswith("worktree ")}


def at_risk(environ, row: dict) -> list[str]:
    """What removing the worktree and its branch would lose (empty: nothing)."""
    repo, path, branch = row["repo"], row["path"], row["branch"]
    lost = []
    if not os.path.isdir(repo):
        return [f"its repository {repo} is not there to check"]
    tips = []
    code, _, _ = git(environ, repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")
    if code == 0:
        tips.append(f"refs/heads/{branch}")
    if os.path.isdir(path):
        code, out, err = git(environ, path, "status", "--porcelain", "-z", "--untracked-files=all")
        if code != 0:
            return [f"its state could not be read ({_reason(err, code)})"]
        changes = _count_status(out)
        if changes:
            lost.append(f"{changes} uncommitted change(s)")
        code, out, _ = git(environ, path, "rev-parse", "--verify", "--quiet", "HEAD")
        if code == 0 and out.strip():
            tips.append(out.strip())
    if tips:
        keep = [row["base_commit"], "--remotes"]
        code, _, _ = git(environ, repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{row['base']}")
        if code == 0 and row["base"] != branch:
            keep.insert(1, f"refs/heads/{row['base']}")
        code, out, err = git(environ, repo, "rev-list", "--count", *tips, "--not", *keep)
        if code != 0:
            return lost + [f"its commits could not be checked ({_reason(err, code)})"]
        if int(out.strip() or 0):
            lost.append(f"{int(out.strip())} commit(s) on {branch} not on {row['base']} or a remote branch")
    return lost


def _count_status(out: str) -> int:
    """The paths ``git status --porcelain -z`` lists (a rename's or copy's source, the
    entry after it, is not counted twice)."""
    entries = out.split("\0")
    count, i = 0, 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) > 3:
            count += 1
            if entry[0] in "RC" or entry[1] in "RC":
                i += 1
    return count


def release(store, environ, member_id: int, *, discard: bool) -> dict | None:
    """At the member's deletion (its pane already closed): remove its worktree and branch
    when nothing would be lost, or with ``discard``; otherwise keep both (status ``kept``).
    ``{"path", "branch", "status": "removed"|"kept", "lost": [...]}``, or None without one."""
    row = records.get(store, member_id)
    if row is None or row["status"] == records.REMOVED:
        return None
    lost = [] if discard else at_risk(environ, row)
    result = {"path": row["path"], "branch": row["branch"], "status": records.KEPT, "lost": lost}
    if lost:
        records.set_status(store, member_id, records.KEPT)
        return result
    problem = _remove(environ, row, force=discard)
    if problem:
        records.set_status(store, member_id, records.KEPT)
        result["lost"] = [problem]
        return result
    records.set_status(store, member_id, records.REMOVED)
    result["status"] = records.REMOVED
    return result


def _remove(environ, row: dict, *, force: bool) -> str | None:
    repo, path, branch = row["repo"], row["path"], row["branch"]
    if not os.path.isdir(repo):
        return f"its repository {repo} is not there"
    known = known_paths(environ, repo) or set()
    if os.path.realpath(path) in known:
        args = ["worktree", "remove", *(["--force", "--force"] if force else []), path]
        code, _, err = git(environ, repo, *args)
        if code != 0:
            return f"git would not remove it ({_reason(err, code)})"
    elif os.path.lexists(path):
        return "git does not know it as a worktree any more, so cafleet leaves the folder alone"
    else:
        git(environ, repo, "worktree", "prune")
    code, _, _ = git(environ, repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")
    if code == 0:
        code, _, err = git(environ, repo, "branch", "-D", branch)
        if code != 0:
            return f"its branch could not be deleted ({_reason(err, code)})"
    return None


def kept_line(member_id: int, result: dict) -> str:
    """The one line a delete prints for a worktree it kept."""
    from cafleet.render import inline

    return (
        f"member {member_id}'s worktree {inline(result['path'])} (branch {inline(result['branch'])}) was kept: "
        f"{inline('; '.join(result['lost']))}; `cafleet member delete {member_id} --discard-worktree` removes it anyway"
    )


def diff(store, environ, member_id: int, *, stat: bool) -> dict:
    """The member's changes against its base, committed or not, new files included, as
    ``git diff`` prints them. Read through a temporary index (the worktree's own index
    and files are not touched)."""
    import shutil
    import tempfile

    from cafleet.broker import members
    from cafleet.errors import Conflict

    members.get_member(store, member_id)
    row = records.get(store, member_id)
    if row is None:
        raise Conflict(f"member {member_id} has no worktree; only members created with --worktree have a diff.")
    path = row["path"]
    if row["status"] == records.REMOVED or not os.path.isdir(path):
        raise Conflict(f"member {member_id}'s worktree {path} is not there any more (status {row['status']}).")
    scratch = tempfile.mkdtemp(prefix="cafleet-diff-")
    try:
        env = dict(environ, GIT_INDEX_FILE=os.path.join(scratch, "index"))
        steps = [["read-tree", "HEAD"], ["add", "--all", "--", "."]]
        for step in steps:
            code, _, err = _git_with_index(env, path, *step)
            if code != 0:
                raise CafleetError(f"git could not read member {member_id}'s worktree {path} ({_reason(err, code)}).")
        args = ["diff", "--cached", "--no-color", "--no-ext-diff", *(["--stat"] if stat else []), row["base_commit"]]
        code, out, err = _git_with_index(env, path, *args)
        if code != 0:
            raise CafleetError(f"git could not diff member {member_id}'s worktree {path} ({_reason(err, code)}).")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "member_id": member_id,
        "path": path,
        "branch": row["branch"],
        "base": row["base"],
        "base_commit": row["base_commit"],
        "diff": out,
    }


def _git_with_index(env, cwd: str, *args: str) -> tuple[int, str, str]:
    import subprocess

    run_env = dict(env, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    run_env.pop("GIT_DIR", None)
    run_env.pop("GIT_WORK_TREE", None)
    done = subprocess.run(["git", *args], cwd=cwd, env=run_env, capture_output=True, timeout=120, check=False)
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def survey(store, environ, cwd: str | None) -> list[dict]:
    """What ``doctor`` reports about worktrees, each ``{"kind", "path", "member_id", "detail",
    "command"}``: a worktree kept (or left half-made) for a member that is gone, a recorded
    worktree git no longer knows (moved or pruned), and a worktree in cafleet's folder that
    no record of this database names (made by hand, or by a fleet of another database)."""
    from cafleet import config

    findings: list[dict] = []
    rows = records.outstanding(store)
    recorded = records.all_paths(store)
    known_by_repo: dict[str, set[str] | None] = {}

    def known(repo: str) -> set[str] | None:
        if repo not in known_by_repo:
            known_by_repo[repo] = known_paths(environ, repo) if os.path.isdir(repo) else None
        return known_by_repo[repo]

    for row in rows:
        member_id, path = row["member_id"], row["path"]
        paths = known(row["repo"])
        if paths is not None and os.path.realpath(path) not in paths:
            if row["status"] == records.ADDING and not os.path.lexists(path):
                detail = (
                    f"member {member_id}'s worktree {path} was recorded, but its creation stopped before git made it"
                )
            else:
                detail = f"git no longer knows member {member_id}'s worktree {path} (moved or pruned)"
            findings.append(
                {
                    "kind": "unknown_to_git",
                    "path": path,
                    "member_id": member_id,
                    "detail": detail,
                    "command": f"git -C {row['repo']} worktree repair <its new path> (if it was moved), else "
                    f"cafleet member delete {member_id} --discard-worktree",
                }
            )
        elif row["member_status"] != "active":
            findings.append(
                {
                    "kind": "member_gone",
                    "path": path,
                    "member_id": member_id,
                    "detail": f"worktree {path} (branch {row['branch']}) is kept for member {member_id}, deleted",
                    "command": f"cafleet member delete {member_id} (removes it if nothing would be lost; "
                    "--discard-worktree anyway)",
                }
            )
        elif row["status"] == records.ADDING:
            findings.append(
                {
                    "kind": "unfinished",
                    "path": path,
                    "member_id": member_id,
                    "detail": f"member {member_id}'s creation stopped after git made its worktree {path}",
                    "command": f"cafleet member delete {member_id}",
                }
            )
    try:
        parent = config.worktree_dir(environ)
    except CafleetError:
        return findings
    repos = {row["repo"] for row in rows}
    if cwd is not None:
        code, out, _ = git(environ, cwd, "rev-parse", "--git-common-dir")
        if code == 0 and out.strip():
            common = os.path.realpath(os.path.join(cwd, out.strip()))
            repos.add(os.path.dirname(common) if os.path.basename(common) == ".git" else common)
    folders = []
    if os.path.isdir(parent):
        for group in sorted(os.listdir(parent)):
            group_path = os.path.join(parent, group)
            if os.path.isdir(group_path):
                folders += [os.path.join(group_path, name) for name in sorted(os.listdir(group_path))]
    unrecorded = []
    for folder in folders:
        if folder in recorded or os.path.realpath(folder) in recorded:
            continue
        code, out, _ = git(environ, folder, "rev-parse", "--git-common-dir")
        if code == 0 and out.strip():
            common = os.path.realpath(os.path.join(folder, out.strip()))
            repo = os.path.dirname(common) if os.path.basename(common) == ".git" else common
            unrecorded.append((folder, repo))
            repos.add(repo)
    for repo in sorted(repos):
        for path in sorted(known(repo) or ()):
            if path.startswith(parent.rstrip("/") + "/") and path not in recorded and (path, repo) not in unrecorded:
                unrecorded.append((path, repo))
    for path, repo in unrecorded:
        findings.append(
            {
                "kind": "unrecorded",
                "path": path,
                "member_id": None,
                "detail": f"worktree {path} of {repo} is in cafleet's worktree folder, and no member's record names it",
                "command": f"git -C {repo} worktree remove {path} (git refuses while it holds changes)"
                if os.path.isdir(path)
                else f"git -C {repo} worktree prune",
            }
        )
    return findings
