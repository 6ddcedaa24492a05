"""Members' own git worktrees (docs/worktrees.md): planned and checked before the member is
registered, added (recorded first) before its pane starts, reviewed with ``member diff``,
and removed at deletion only when nothing would be lost.

Every git command and file test runs through a :class:`Runner`: on this machine (a
subprocess with the caller's environment, so ``GIT_CONFIG_GLOBAL``, ``HOME`` and the like
are the user's own choice) or on a member's host over SSH (the same argv, one ``ssh`` call
each, :class:`cafleet.mux.ssh.Ssh`). Never a shell of the user's choosing: a few fixed
``sh -c`` scripts whose values are their positional arguments. Prompts are off.

What "nothing lost" means, checked after the member's pane is closed (so its agent can no
longer write): the worktree has no change ``git status`` reports (modified, staged or
untracked files) and no file git ignores (an ``.env``, local notes, a build folder:
``git worktree remove`` would delete them without asking, and only the member knows
whether they matter), and neither its branch nor the worktree's ``HEAD`` has a commit that
is not on its base (the commit it started from, or the base branch as it is now) or on a
remote-tracking branch. Otherwise both are kept and the reason is said in one line.
"""

from __future__ import annotations

import os

from cafleet import config
from cafleet.broker import worktrees as records
from cafleet.errors import CafleetError, UsageError, clause
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
TIMEOUT = 120.0
SHOWN_IGNORED = 3  # the ignored paths a kept worktree's line names; the rest are counted

# The member's changes against its base, new files included, through a temporary index
# ($1: the worktree; the rest: `git diff` options and the base): the worktree's own index
# and files are never written.
_DIFF = (
    "w=$1; shift; d=$(mktemp -d) || exit 1; trap 'rm -rf \"$d\"' EXIT; "
    'export GIT_INDEX_FILE="$d/index"; cd "$w" && git read-tree HEAD && git add --all -- . '
    '&& git diff --cached --no-color --no-ext-diff "$@"'
)
_REAL_DIR = 'cd "$1" 2>/dev/null && pwd -P || printf "%s\\n" "$1"'
_FOLDERS = 'for d in "$1"/*/*; do [ -d "$d" ] && printf "%s\\n" "$d"; done; true'
_REMOTE_DIR = 'printf "%s\\n" "${XDG_DATA_HOME:-$HOME/.local/share}/cafleet/worktrees"'


class Runner:
    """Where a worktree's commands run: this machine (``host`` None) or a host over SSH."""

    def __init__(self, environ, host: str | None = None) -> None:
        self.environ = environ
        self.host = host
        self.ssh = None
        if host is not None:
            from cafleet.mux.ssh import Ssh

            self.ssh = Ssh(host, environ)

    def where(self) -> str:
        return "" if self.host is None else f" on host {self.host}"

    def run(self, *argv: str) -> tuple[int, str, str]:
        if self.ssh is not None:
            code, out, err = self.ssh.run(["env", *(f"{k}={v}" for k, v in GIT_ENV.items()), *argv], timeout=TIMEOUT)
            return code, out, err
        import subprocess

        env = config.child_environ(self.environ, drop=("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"), **GIT_ENV)
        try:
            done = subprocess.run(list(argv), env=env, capture_output=True, timeout=TIMEOUT, check=False)
        except FileNotFoundError:
            raise CafleetError(f"{argv[0]} is not installed (not on PATH); install git to use --worktree.") from None
        except (OSError, subprocess.TimeoutExpired) as error:
            raise CafleetError(f"{argv[0]} could not run ({error}).") from None
        return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")

    def git(self, cwd: str, *args: str) -> tuple[int, str, str]:
        return self.run("git", "-C", cwd, *args)

    def sh(self, script: str, *args: str) -> tuple[int, str, str]:
        return self.run("sh", "-c", script, "sh", *args)

    def isdir(self, path: str) -> bool:
        if self.ssh is None:
            return os.path.isdir(path)
        return self.sh('[ -d "$1" ]', path)[0] == 0

    def exists(self, path: str) -> bool:
        if self.ssh is None:
            return os.path.lexists(path)
        return self.sh('[ -e "$1" ] || [ -L "$1" ]', path)[0] == 0

    def realpath(self, path: str) -> str:
        if self.ssh is None:
            return os.path.realpath(path)
        code, out, _ = self.sh(_REAL_DIR, path)
        return out.strip() if code == 0 and out.strip() else path

    def makedirs(self, path: str) -> None:
        if self.ssh is None:
            os.makedirs(path, exist_ok=True)
            return
        code, _, err = self.sh('mkdir -p -- "$1"', path)
        if code != 0:
            raise CafleetError(f"the folder {path} could not be made{self.where()} ({_reason(err, code)}).")

    def worktree_dir(self) -> str:
        if self.ssh is None:
            return config.worktree_dir(self.environ)
        code, out, err = self.sh(_REMOTE_DIR)
        if code != 0 or not out.strip().startswith("/"):
            raise CafleetError(f"host {self.host} did not say where its worktrees go ({_reason(err, code)}).")
        return self.realpath(out.strip())

    def folders(self, parent: str) -> list[str]:
        """The folders two levels below ``parent`` (one per worktree cafleet may have made)."""
        code, out, _ = self.sh(_FOLDERS, parent)
        return sorted(line for line in out.splitlines() if line) if code == 0 else []


def runner(environ, host: str | None) -> Runner:
    return Runner(environ, host)


class Plan:
    """What ``git worktree add`` will be given for a new member."""

    __slots__ = ("base", "base_commit", "branch", "cwd", "explicit_branch", "repo", "root", "runner")

    def __init__(self, run: Runner, repo, cwd, branch, base, base_commit, root, explicit_branch) -> None:
        self.runner = run
        self.repo = repo  # the main worktree's folder (where git commands for this repository run)
        self.cwd = cwd
        self.branch = branch
        self.base = base
        self.base_commit = base_commit
        self.root = root  # the folder under the worktree dir that holds this repository's worktrees
        self.explicit_branch = explicit_branch


def _reason(err: str, code: int) -> str:
    from cafleet.mux import first_line

    return first_line(err) or f"exit status {code}"


def slug(name: str) -> str:
    """A member name as a part of a branch name and a folder name."""
    kept = "".join(c if (c.isascii() and (c.isalnum() or c in "._-")) else "-" for c in name)
    kept = "-".join(part for part in kept.split("-") if part).strip(".")
    return (kept[:40].rstrip(".-") or "member").replace("..", ".")


def _repo_of(run: Runner, cwd: str, common: str) -> str:
    common = run.realpath(common if common.startswith("/") else os.path.join(cwd, common))
    return os.path.dirname(common) if os.path.basename(common) == ".git" else common


def plan(environ, cwd: str, branch: str | None, base: str | None, host: str | None = None) -> Plan:
    """Check, before anything is written, that ``cwd`` (on ``host``, or here) is inside a
    work tree of a git repository, that the base names a commit and that a chosen branch is
    free."""
    import hashlib

    run = runner(environ, host)
    code, out, err = run.git(cwd, "rev-parse", "--show-toplevel", "--git-common-dir")
    lines = out.splitlines()
    if code != 0 or len(lines) < 2 or not lines[0]:
        raise CafleetError(
            f"--worktree needs the current directory to be inside a git repository's work tree, and {cwd}"
            f"{run.where()} is not ({_reason(err, code)}); cd into the repository"
            + (", give its path there with --repo," if host else "")
            + " or leave out --worktree."
        )
    repo = _repo_of(run, cwd, lines[1])
    given = base or "HEAD"
    code, out, err = run.git(cwd, "rev-parse", "--verify", "--quiet", "--end-of-options", given + "^{commit}")
    if code != 0 or not out.strip():
        raise UsageError(
            f"--base {given} names no commit of the repository at {repo}{run.where()}; give a branch, tag or commit."
        )
    base_commit = out.strip()
    if base is None:  # the Director's HEAD: its branch when it is on one, so "on its base" follows that branch
        code, out, _ = run.git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD")
        given = out.strip() if code == 0 and out.strip() else base_commit
    if branch is not None:
        branch = check_branch(run, repo, branch)
    parent = run.worktree_dir()
    top = run.realpath(lines[0])
    for inside in {top, repo}:
        if parent == inside or parent.startswith(inside.rstrip("/") + "/"):
            raise CafleetError(
                f"the worktree folder {parent} is inside the repository at {inside}, where every worktree would show "
                "in its `git status`; set CAFLEET_WORKTREE_DIR to a folder outside it."
            )
    key = hashlib.sha256(repo.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    root = os.path.join(parent, f"{slug(os.path.basename(repo))}-{key}")
    return Plan(run, repo, cwd, branch, given, base_commit, root, branch is not None)


def check_branch(run: Runner, repo: str, branch: str) -> str:
    """The new branch's name: ``refs/heads/NAME`` is taken as NAME; refused (UsageError)
    when it is not a valid branch name, is ``@`` (git reads it as ``HEAD``), names another
    kind of ref (``refs/tags/...``), or is what git reads as another branch (``@{-1}``);
    refused when the branch exists."""
    given = branch
    branch = branch.removeprefix("refs/heads/")
    if branch == "@":
        raise UsageError(f"--branch {given!r} is not a branch name (git reads @ as HEAD); give the new branch's name.")
    if branch.startswith("refs/"):
        raise UsageError(
            f"--branch {given!r} is the full name of a ref, not a branch name; give the new branch's name."
        )
    code, out, _ = run.git(repo, "check-ref-format", "--branch", branch)
    if code != 0 or branch.startswith("-"):
        raise UsageError(f"--branch {given!r} is not a valid git branch name.")
    if out.strip() != branch:
        raise UsageError(
            f"--branch {given!r} is not a branch name (git reads it as {out.strip()!r}); give the new branch's name."
        )
    code, _, _ = run.git(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")
    if code == 0:
        raise CafleetError(
            f"branch {branch} already exists in the repository at {repo}{run.where()}; choose another --branch "
            "(a member's worktree always starts on a new branch)."
        )
    return branch


def member_path(plan_: Plan, fleet_id: int, member_id: int, name: str) -> str:
    return os.path.join(plan_.root, f"f{fleet_id}-m{member_id}-{slug(name)}")


def default_branch(fleet_id: int, member_id: int, name: str) -> str:
    return f"cafleet/f{fleet_id}-m{member_id}-{slug(name)}"


def add(store: Store, plan_: Plan, fleet_id: int, member_id: int, name: str, hooks: Hooks = NO_HOOKS) -> dict:
    """Record, then add, the member's worktree on its new branch; the row is ``ready``
    once git has made it. Raises with nothing left in git when git refuses."""

    run = plan_.runner
    branch = plan_.branch or default_branch(fleet_id, member_id, name)
    if not plan_.explicit_branch:
        check_branch(run, plan_.repo, branch)
    path = member_path(plan_, fleet_id, member_id, name)
    if run.exists(path):
        raise CafleetError(
            f"the worktree path {path}{run.where()} already exists; move it away, or set CAFLEET_WORKTREE_DIR."
        )
    records.record(
        store,
        member_id,
        repo=plan_.repo,
        path=path,
        branch=branch,
        base=plan_.base,
        base_commit=plan_.base_commit,
        host=run.host,
    )
    hooks.pause("create.worktree_recorded")
    run.makedirs(plan_.root)
    code, _, err = run.git(plan_.repo, "worktree", "add", "--quiet", "-b", branch, path, plan_.base_commit)
    if code != 0:
        records.set_status(store, member_id, records.REMOVED)  # git made nothing: the row only keeps the path
        raise CafleetError(f"git could not add the worktree {path}{run.where()} ({_reason(err, code)}).")
    hooks.pause("create.worktree_added")
    records.set_status(store, member_id, records.READY)
    out = {"path": path, "branch": branch, "base": plan_.base, "base_commit": plan_.base_commit}
    if run.host is not None:
        out["host"] = run.host
    return out


def known_paths(run: Runner, repo: str) -> set[str] | None:
    """The worktree paths git knows for ``repo`` (None: git could not say)."""
    code, out, _ = run.git(repo, "worktree", "list", "--porcelain")
    if code != 0:
        return None
    listed = [line[9:] for line in out.splitlines() if line.startswith("worktree ")]
    return {os.path.realpath(p) for p in listed} if run.host is None else set(listed)


def _same(run: Runner, path: str) -> str:
    return os.path.realpath(path) if run.host is None else path


def at_risk(run: Runner, row: dict) -> list[str]:
    """What removing the worktree and its branch would lose (empty: nothing)."""
    repo, path, branch = row["repo"], row["path"], row["branch"]
    lost = []
    if not run.isdir(repo):
        return [f"its repository {repo}{run.where()} is not there to check"]
    tips = []
    code, _, _ = run.git(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")
    if code == 0:
        tips.append(f"refs/heads/{branch}")
    if run.isdir(path):
        code, out, err = run.git(path, "status", "--porcelain", "-z", "--untracked-files=all", "--ignored=matching")
        if code != 0:
            return [f"its state could not be read ({_reason(err, code)})"]
        changes, ignored = _read_status(out)
        if changes:
            lost.append(f"{changes} uncommitted change(s)")
        if ignored:
            more = f" and {len(ignored) - SHOWN_IGNORED} more" if len(ignored) > SHOWN_IGNORED else ""
            lost.append(f"{len(ignored)} path(s) git ignores ({', '.join(ignored[:SHOWN_IGNORED])}{more})")
        code, out, _ = run.git(path, "rev-parse", "--verify", "--quiet", "HEAD")
        if code == 0 and out.strip():
            tips.append(out.strip())
    if tips:
        keep = [row["base_commit"], "--remotes"]
        code, _, _ = run.git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{row['base']}")
        if code == 0 and row["base"] != branch:
            keep.insert(1, f"refs/heads/{row['base']}")
        code, out, err = run.git(repo, "rev-list", "--count", *tips, "--not", *keep)
        if code != 0:
            return [*lost, f"its commits could not be checked ({_reason(err, code)})"]
        if int(out.strip() or 0):
            lost.append(f"{int(out.strip())} commit(s) on {branch} not on {row['base']} or a remote branch")
    return lost


def _read_status(out: str) -> tuple[int, list[str]]:
    """What ``git status --porcelain -z --ignored=matching`` lists: how many paths have a
    change (a rename's or copy's source, the entry after it, is not counted twice), and the
    ignored paths (``!!``; an ignored folder is one path, ending in ``/``), in git's order."""
    entries = out.split("\0")
    count, ignored, i = 0, [], 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) > 3 and entry[:3] == "!! ":
            ignored.append(entry[3:])
        elif len(entry) > 3:
            count += 1
            if entry[0] in "RC" or entry[1] in "RC":
                i += 1
    return count, ignored


def release(store: Store, environ, member_id: int, *, discard: bool) -> dict | None:
    """At the member's deletion (its pane already closed): remove its worktree and branch
    when nothing would be lost, or with ``discard``; otherwise keep both (status ``kept``).
    ``{"path", "branch", "status": "removed"|"kept", "lost": [...]}``, or None without one.
    A host that cannot be reached keeps it, and says so."""
    row = records.get(store, member_id)
    if row is None or row["status"] == records.REMOVED:
        return None
    result = {"path": row["path"], "branch": row["branch"], "status": records.KEPT, "lost": []}
    if row["host"] is not None:
        result["host"] = row["host"]
    try:
        run = runner(environ, row["host"])
        lost = [] if discard else at_risk(run, row)
        if not lost:
            problem = _remove(run, row, force=discard)
            lost = [problem] if problem else []
    except CafleetError as error:
        lost = [f"it could not be checked ({clause(error)})"]
    if lost:
        records.set_status(store, member_id, records.KEPT)
        result["lost"] = lost
        return result
    records.set_status(store, member_id, records.REMOVED)
    result["status"] = records.REMOVED
    return result


def _remove(run: Runner, row: dict, *, force: bool) -> str | None:
    repo, path, branch = row["repo"], row["path"], row["branch"]
    if not run.isdir(repo):
        return f"its repository {repo}{run.where()} is not there"
    known = known_paths(run, repo) or set()
    if _same(run, path) in known:
        args = ["worktree", "remove", *(["--force", "--force"] if force else []), path]
        code, _, err = run.git(repo, *args)
        if code != 0:
            return f"git would not remove it ({_reason(err, code)})"
    elif run.exists(path):
        return "git does not know it as a worktree any more, so cafleet leaves the folder alone"
    else:
        run.git(repo, "worktree", "prune")
    code, _, _ = run.git(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")
    if code == 0:
        code, _, err = run.git(repo, "branch", "-D", branch)
        if code != 0:
            return f"its branch could not be deleted ({_reason(err, code)})"
    return None


def kept_line(member_id: int, result: dict) -> str:
    """The one line a delete prints for a worktree it kept."""
    from cafleet.render import inline

    where = f" on host {inline(result['host'])}" if result.get("host") else ""
    return (
        f"member {member_id}'s worktree {inline(result['path'])}{where} (branch {inline(result['branch'])}) was kept: "
        f"{inline('; '.join(result['lost']))}; `cafleet member delete {member_id} --discard-worktree` removes it anyway"
    )


def diff(store: Store, environ, member_id: int, *, stat: bool) -> dict:
    """The member's changes against its base, committed or not, new files included, as
    ``git diff`` prints them. Read through a temporary index (the worktree's own index
    and files are not touched)."""
    from cafleet.broker import members
    from cafleet.errors import Conflict

    members.get_member(store, member_id)
    row = records.get(store, member_id)
    if row is None:
        raise Conflict(f"member {member_id} has no worktree; only members created with --worktree have a diff.")
    path = row["path"]
    run = runner(environ, row["host"])
    if row["status"] == records.REMOVED or not run.isdir(path):
        raise Conflict(
            f"member {member_id}'s worktree {path}{run.where()} is not there any more (status {row['status']})."
        )
    code, out, err = run.sh(_DIFF, path, *(["--stat"] if stat else []), row["base_commit"])
    if code != 0:
        raise CafleetError(
            f"git could not diff member {member_id}'s worktree {path}{run.where()} ({_reason(err, code)})."
        )
    return {
        "member_id": member_id,
        "path": path,
        "branch": row["branch"],
        "base": row["base"],
        "base_commit": row["base_commit"],
        "host": row["host"],
        "diff": out,
    }


def survey(store: Store, environ, cwd: str | None) -> list[dict]:
    """What ``doctor`` reports about worktrees, each ``{"kind", "path", "member_id", "detail",
    "command", "host"}``: a worktree kept (or left half-made) for a member that is gone, a
    recorded worktree git no longer knows (moved or pruned), and a worktree in this
    machine's cafleet worktree folder that no record of this database names (made by hand,
    or by a fleet of another database). A host that cannot be reached is said as such."""
    findings: list[dict] = []
    rows = records.outstanding(store)
    recorded = records.all_paths(store)
    runners: dict[str | None, Runner] = {None: runner(environ, None)}
    known_by_repo: dict[tuple, set[str] | None] = {}

    def known(run: Runner, repo: str) -> set[str] | None:
        key = (run.host, repo)
        if key not in known_by_repo:
            known_by_repo[key] = known_paths(run, repo) if run.isdir(repo) else None
        return known_by_repo[key]

    def finding(kind, row, detail, command) -> dict:
        return {
            "kind": kind,
            "path": row["path"],
            "member_id": row["member_id"],
            "host": row["host"],
            "detail": detail,
            "command": command,
        }

    for row in rows:
        member_id, path = row["member_id"], row["path"]
        try:
            run = runners.get(row["host"]) or runners.setdefault(row["host"], runner(environ, row["host"]))
            where = run.where()
            paths = known(run, row["repo"])
            gone = paths is not None and _same(run, path) not in paths
            missing = gone and row["status"] == records.ADDING and not run.exists(path)
        except CafleetError as error:
            findings.append(
                finding(
                    "unreachable",
                    row,
                    f"member {member_id}'s worktree {path} could not be checked ({clause(error)})",
                    "cafleet doctor --host " + row["host"] if row["host"] else "cafleet doctor",
                )
            )
            continue
        repo = row["repo"]
        if gone:
            detail = (
                f"member {member_id}'s worktree {path}{where} was recorded, but its creation stopped before git made it"
                if missing
                else f"git no longer knows member {member_id}'s worktree {path}{where} (moved or pruned)"
            )
            findings.append(
                finding(
                    "unknown_to_git",
                    row,
                    detail,
                    f"git -C {repo} worktree repair <its new path> (if it was moved), else "
                    f"cafleet member delete {member_id} --discard-worktree",
                )
            )
        elif row["member_status"] != "active":
            findings.append(
                finding(
                    "member_gone",
                    row,
                    f"worktree {path}{where} (branch {row['branch']}) is kept for member {member_id}, deleted",
                    f"cafleet member delete {member_id} (removes it if nothing would be lost; --discard-worktree anyway)",
                )
            )
        elif row["status"] == records.ADDING:
            findings.append(
                finding(
                    "unfinished",
                    row,
                    f"member {member_id}'s creation stopped after git made its worktree {path}{where}",
                    f"cafleet member delete {member_id}",
                )
            )
    findings += _unrecorded(runners[None], cwd, rows, recorded, known)
    return findings


def _unrecorded(run: Runner, cwd, rows, recorded: set[str], known) -> list[dict]:
    """Worktrees in this machine's worktree folder that no record names."""
    try:
        parent = run.worktree_dir()
    except CafleetError:
        return []
    repos = {row["repo"] for row in rows if row["host"] is None}
    if cwd is not None:
        code, out, _ = run.git(cwd, "rev-parse", "--git-common-dir")
        if code == 0 and out.strip():
            repos.add(_repo_of(run, cwd, out.strip()))
    unrecorded = []
    for folder in run.folders(parent) if os.path.isdir(parent) else []:
        if folder in recorded or os.path.realpath(folder) in recorded:
            continue
        code, out, _ = run.git(folder, "rev-parse", "--git-common-dir")
        if code == 0 and out.strip():
            repo = _repo_of(run, folder, out.strip())
            unrecorded.append((folder, repo))
            repos.add(repo)
    for repo in sorted(repos):
        for path in sorted(known(run, repo) or ()):
            if path.startswith(parent.rstrip("/") + "/") and path not in recorded and (path, repo) not in unrecorded:
                unrecorded.append((path, repo))
    return [
        {
            "kind": "unrecorded",
            "path": path,
            "member_id": None,
            "host": None,
            "detail": f"worktree {path} of {repo} is in cafleet's worktree folder, and no member's record names it",
            "command": f"git -C {repo} worktree remove {path} (git refuses while it holds changes)"
            if os.path.isdir(path)
            else f"git -C {repo} worktree prune",
        }
        for path, repo in unrecorded
    ]
