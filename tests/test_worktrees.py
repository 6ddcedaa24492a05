"""Members in their own git worktrees (docs/worktrees.md), through the real command line.

Each test makes a real git repository in tmp_path (git's global config is a throw-away
file, ``GIT_CONFIG_GLOBAL``; the system's is not read), a private tmux server whose first
pane is the Director's, and a fleet created from that pane; members run the stand-in
agent. The Director's commands run in the repository (cafleet takes the repository from
the current directory). What is checked is what git, the process table and the database
say: no delete, crash or retry may lose a line of uncommitted or unpushed work.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hooked import LAUNCHER
from tests.support.pane_fleet import CliResult, tmux_fleet
from tests.support.tmux_fixtures import wait_for


def git(cwd, *args: str, env=None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env or os.environ, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Test\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n")
    for key, value in {"GIT_CONFIG_GLOBAL": str(gitconfig), "GIT_CONFIG_NOSYSTEM": "1"}.items():
        env[key] = value
        monkeypatch.setenv(key, value)
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        repo = tmp_path / "repo"
        repo.mkdir()
        git(repo, "init", "--quiet")
        (repo / "README").write_text("one\ntwo\n")
        git(repo, "add", "README")
        git(repo, "commit", "--quiet", "-m", "first")
        pane_fleet.repo = repo
        pane_fleet.worktree_dir = Path(env["XDG_DATA_HOME"]) / "cafleet" / "worktrees"
        yield pane_fleet


def run(fleet, *args: str, cwd=None, input: bytes = b"") -> CliResult:
    done = subprocess.run(
        [sys.executable, "-m", "cafleet", *args],
        input=input,
        capture_output=True,
        env=dict(fleet.environ),
        cwd=cwd or fleet.repo,
        timeout=60,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def create(fleet, name: str, *extra: str, cwd=None) -> CliResult:
    return run(
        fleet,
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        name,
        "--description",
        f"{name} worker",
        "--coding-agent",
        "standin",
        "--json",
        *extra,
        "Work on it.",
        cwd=cwd,
    )


def pane_cwd(fleet, pane_id: str) -> str:
    pid = int(fleet.server.run("display-message", "-p", "-t", pane_id, "#{pane_pid}").strip())
    return os.readlink(f"/proc/{pid}/cwd")


def worktree_rows(fleet) -> list[tuple]:
    return fleet.query("SELECT member_id, path, branch, status FROM cafleet_aux_member_worktrees ORDER BY member_id")


def branches(repo) -> set[str]:
    return set(git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split())


def test_three_members_three_worktrees_each_diff_shows_its_own_work(fleet):
    made = []
    for name in ("ann", "bob", "cid"):
        result = create(fleet, name, "--worktree")
        assert result.code == 0, result
        made.append(result.json())
    paths = [m["worktree"]["path"] for m in made]
    assert len(set(paths)) == 3
    head = git(fleet.repo, "rev-parse", "HEAD").strip()
    for record in made:
        tree = record["worktree"]
        assert tree["path"].startswith(str(fleet.worktree_dir.resolve()) + "/")
        assert tree["branch"] == f"cafleet/f{fleet.fleet_id}-m{record['member_id']}-{record['name']}"
        assert tree["base"] == "main" and tree["base_commit"] == head
        assert git(tree["path"], "rev-parse", "--abbrev-ref", "HEAD").strip() == tree["branch"]
        fleet.wait_ready(record["member_id"])
        assert pane_cwd(fleet, record["pane_id"]) == tree["path"]  # the agent runs in its worktree
    assert git(fleet.repo, "status", "--porcelain") == ""  # nothing shows in the repository's status
    # each edits and commits on its own branch (and leaves one change uncommitted, one file new)
    for record in made:
        path = Path(record["worktree"]["path"])
        (path / "README").write_text(f"one\ntwo\n{record['name']} was here\n")
        git(path, "commit", "--quiet", "-am", f"{record['name']} works")
        (path / f"{record['name']}.txt").write_text("new file\n")
    for record in made:
        shown = run(fleet, "member", "diff", str(record["member_id"]))
        assert shown.code == 0, shown
        assert f"+{record['name']} was here" in shown.out
        assert f"+++ b/{record['name']}.txt" in shown.out
        others = {"ann", "bob", "cid"} - {record["name"]}
        assert not any(f"{other} was here" in shown.out for other in others)
        stat = run(fleet, "member", "diff", str(record["member_id"]), "--stat")
        rows = [" ".join(line.split()) for line in stat.out.splitlines()]
        assert rows == ["README | 1 +", f"{record['name']}.txt | 1 +", "2 files changed, 2 insertions(+)"], rows
    # the diff read nothing into the worktree's own index: the new file is still untracked
    assert git(made[0]["worktree"]["path"], "status", "--porcelain") == "?? ann.txt\n"
    shown = run(fleet, "member", "show", str(made[0]["member_id"]))
    assert f"worktree: {paths[0]} (branch {made[0]['worktree']['branch']} from main {head[:12]}, ready)" in shown.out
    listed = run(fleet, "member", "list", str(fleet.fleet_id))
    assert "WORKTREE BRANCH" in listed.out and made[2]["worktree"]["branch"] in listed.out
    as_json = run(fleet, "member", "list", str(fleet.fleet_id), "--json").json()
    by_id = {r["member_id"]: r for r in as_json}
    assert by_id[made[1]["member_id"]]["worktree"]["path"] == paths[1]
    assert "worktree" not in by_id[fleet.director]  # a member without one: its roster record is unchanged


def test_refusals_write_nothing(fleet, tmp_path):
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    result = create(fleet, "ann", "--worktree", cwd=outside)
    assert result.code == 1 and result.err.startswith("Error: --worktree needs the current directory"), result
    git(fleet.repo, "branch", "taken")
    result = create(fleet, "ann", "--worktree", "--branch", "taken")
    assert result.code == 1 and "branch taken already exists" in result.err, result
    result = create(fleet, "ann", "--worktree", "--base", "no-such-ref")
    assert result.code == 2 and "--base no-such-ref names no commit" in result.err, result
    result = create(fleet, "ann", "--worktree", "--branch", "bad..name")
    assert result.code == 2 and "not a valid git branch name" in result.err, result
    result = create(fleet, "ann", "--branch", "x")
    assert result.code == 2 and "add --worktree" in result.err, result
    result = create(fleet, "ann", "--worktree", "--repo", str(fleet.repo))
    assert result.code == 2 and "needs --worktree and --host" in result.err, result
    result = create(fleet, "ann", "--worktree", "--no-worktree")
    assert result.code == 2, result
    inside = dict(fleet.environ, CAFLEET_WORKTREE_DIR=str(fleet.repo / "trees"))
    done = subprocess.run(
        [sys.executable, "-m", "cafleet", *create_args(fleet, "ann"), "--worktree"],
        env=inside,
        cwd=fleet.repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "is inside the repository" in done.stderr, done.stderr
    assert fleet.query("SELECT COUNT(*) FROM members")[0][0] == 1  # the Director only
    assert branches(fleet.repo) == {"main", "taken"}
    assert not fleet.worktree_dir.exists()


def create_args(fleet, name):
    return ["member", "create", "--fleet-id", str(fleet.fleet_id), "--name", name, "--description", "d", "Work."]


def test_a_path_that_exists_is_refused_and_the_member_undone(fleet):
    first = create(fleet, "ann", "--worktree").json()
    root = Path(first["worktree"]["path"]).parent
    squatter = root / f"f{fleet.fleet_id}-m{first['member_id'] + 1}-bob"
    squatter.mkdir()
    (squatter / "keep.txt").write_text("not cafleet's\n")
    result = create(fleet, "bob", "--worktree")
    assert result.code == 1 and f"the worktree path {squatter} already exists" in result.err, result
    assert (squatter / "keep.txt").read_text() == "not cafleet's\n"
    assert fleet.member_count() == 2  # the Director and ann: bob was deregistered
    assert f"cafleet/f{fleet.fleet_id}-m{first['member_id'] + 1}-bob" not in branches(fleet.repo)


def test_member_delete_keeps_dirty_and_unpushed_work_and_removes_clean_worktrees(fleet, tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    git(fleet.repo, "remote", "add", "origin", str(remote))
    git(fleet.repo, "push", "--quiet", "origin", "main")
    made = {
        name: create(fleet, name, "--worktree").json() for name in ("dirty", "unpushed", "pushed", "merged", "clean")
    }
    path = {name: Path(m["worktree"]["path"]) for name, m in made.items()}
    (path["dirty"] / "notes.txt").write_text("uncommitted line\n")
    for name in ("unpushed", "pushed", "merged"):
        (path[name] / "README").write_text(f"{name}\n")
        git(path[name], "commit", "--quiet", "-am", name)
    git(path["pushed"], "push", "--quiet", "origin", "HEAD")
    git(fleet.repo, "merge", "--quiet", "--ff-only", made["merged"]["worktree"]["branch"])  # the Director merged it

    outcome = {}
    for name, record in made.items():
        result = run(fleet, "member", "delete", str(record["member_id"]), "--json")
        assert result.code == 0, result
        outcome[name] = result.json()["worktree"]
    assert outcome["dirty"]["status"] == "kept" and outcome["dirty"]["lost"] == ["1 uncommitted change(s)"]
    assert outcome["unpushed"]["status"] == "kept"
    assert outcome["unpushed"]["lost"] == [
        f"1 commit(s) on {made['unpushed']['worktree']['branch']} not on main or a remote branch"
    ]
    for name in ("pushed", "merged", "clean"):
        assert outcome[name]["status"] == "removed", (name, outcome[name])
        assert not path[name].exists()
        assert made[name]["worktree"]["branch"] not in branches(fleet.repo)
    assert (path["dirty"] / "notes.txt").read_text() == "uncommitted line\n"
    assert git(path["unpushed"], "log", "-1", "--format=%s").strip() == "unpushed"
    # the text form says it in one line naming the path and what would be lost
    again = run(fleet, "member", "delete", str(made["dirty"]["member_id"]))
    assert again.code == 0, again
    line = again.out.splitlines()[1]
    assert str(path["dirty"]) in line and "1 uncommitted change(s)" in line and "--discard-worktree" in line
    # discarded only once asked explicitly
    gone = run(fleet, "member", "delete", str(made["dirty"]["member_id"]), "--discard-worktree", "--json")
    assert gone.code == 0 and gone.json()["worktree"]["status"] == "removed", gone
    assert not path["dirty"].exists() and made["dirty"]["worktree"]["branch"] not in branches(fleet.repo)
    statuses = {row[0]: row[3] for row in worktree_rows(fleet)}
    assert statuses[made["unpushed"]["member_id"]] == "kept"
    assert statuses[made["dirty"]["member_id"]] == "removed"


def test_fleet_delete_keeps_what_would_be_lost(fleet):
    created = run(fleet, "fleet", "create", "--name", "wt", "--coding-agent", "standin", "--worktrees", "--json")
    assert created.code == 0, created
    fleet.fleet_id = created.json()["fleet_id"]
    a = create(fleet, "ann").json()  # the fleet's default: a worktree
    b = create(fleet, "bob").json()
    c = create(fleet, "cid", "--no-worktree").json()
    assert "worktree" in a and "worktree" in b and "worktree" not in c
    (Path(a["worktree"]["path"]) / "wip.txt").write_text("half done\n")
    deleted = run(fleet, "fleet", "delete", str(fleet.fleet_id), "--json")
    assert deleted.code == 0, deleted
    trees = {t["member_id"]: t for t in deleted.json()["worktrees"]}
    assert trees[a["member_id"]]["status"] == "kept" and trees[b["member_id"]]["status"] == "removed"
    assert (Path(a["worktree"]["path"]) / "wip.txt").read_text() == "half done\n"
    assert not Path(b["worktree"]["path"]).exists()
    doctor = run(fleet, "doctor", "--json").json()["worktrees"]["findings"]
    assert [(f["kind"], f["member_id"]) for f in doctor] == [("member_gone", a["member_id"])]
    assert doctor[0]["command"].startswith(f"cafleet member delete {a['member_id']}")


def commit_gitignore(fleet) -> None:
    (fleet.repo / ".gitignore").write_text(".env\nnotes/\nnode_modules/\n*.log\n")
    git(fleet.repo, "add", ".gitignore")
    git(fleet.repo, "commit", "--quiet", "-m", "ignore")


def test_files_git_ignores_are_unsaved_work_kept_and_named_until_discarded(fleet):
    """An `.env` or a build folder the repository ignores is the member's too: `git status`
    is clean and `git worktree remove` would delete them, so the worktree is kept and the
    line names the ignored paths (the first three, then how many more)."""
    commit_gitignore(fleet)
    made = {name: create(fleet, name, "--worktree").json() for name in ("secrets", "builds", "clean")}
    path = {name: Path(m["worktree"]["path"]) for name, m in made.items()}
    (path["secrets"] / ".env").write_text("TOKEN=only-here\n")
    (path["builds"] / "node_modules" / "pkg").mkdir(parents=True)
    (path["builds"] / "node_modules" / "pkg" / "index.js").write_text("x\n")
    (path["builds"] / "notes").mkdir()
    (path["builds"] / "notes" / "todo.md").write_text("ask about the parser\n")
    for log in ("a.log", "b.log", "c.log"):
        (path["builds"] / log).write_text("log\n")
    assert git(path["secrets"], "status", "--porcelain") == git(path["builds"], "status", "--porcelain") == ""

    outcome = {}
    for name, record in made.items():
        result = run(fleet, "member", "delete", str(record["member_id"]), "--json")
        assert result.code == 0, result
        outcome[name] = result.json()["worktree"]
    assert (outcome["secrets"]["status"], outcome["secrets"]["lost"]) == ("kept", ["1 path(s) git ignores (.env)"])
    assert (outcome["builds"]["status"], outcome["builds"]["lost"]) == (
        "kept",
        ["5 path(s) git ignores (a.log, b.log, c.log and 2 more)"],
    )
    assert outcome["clean"]["status"] == "removed" and not path["clean"].exists()
    assert (path["secrets"] / ".env").read_text() == "TOKEN=only-here\n"
    assert (path["builds"] / "notes" / "todo.md").read_text() == "ask about the parser\n"
    assert {made[n]["worktree"]["branch"] for n in ("secrets", "builds")} <= branches(fleet.repo)
    # the text form: one line naming the worktree and the ignored path
    again = run(fleet, "member", "delete", str(made["secrets"]["member_id"]))
    assert again.code == 0, again
    [line] = [line for line in again.out.splitlines() if "was kept" in line]
    assert str(path["secrets"]) in line and "1 path(s) git ignores (.env)" in line and "--discard-worktree" in line
    # doctor lists both, so they do not pile up unseen
    found = run(fleet, "doctor", "--json").json()["worktrees"]["findings"]
    assert sorted((f["kind"], f["member_id"]) for f in found) == sorted(
        ("member_gone", made[n]["member_id"]) for n in ("secrets", "builds")
    )
    # only --discard-worktree removes them
    for name in ("secrets", "builds"):
        gone = run(fleet, "member", "delete", str(made[name]["member_id"]), "--discard-worktree", "--json")
        assert gone.code == 0 and gone.json()["worktree"]["status"] == "removed", gone
        assert not path[name].exists() and made[name]["worktree"]["branch"] not in branches(fleet.repo)
    assert "worktrees" not in run(fleet, "doctor", "--json").json()


def test_fleet_watch_lists_each_kept_worktree_once(fleet, tmp_path):
    """A worktree kept at a member's deletion is listed by `fleet watch` once: those kept
    before it started, and one kept while it runs (seen by a later round than the first
    one's event, so a repeat of the first would come before it)."""
    ann = create(fleet, "ann", "--worktree").json()
    cid = create(fleet, "cid", "--worktree").json()
    (Path(ann["worktree"]["path"]) / "notes.txt").write_text("mine\n")
    (Path(cid["worktree"]["path"]) / "wip.txt").write_text("half done\n")
    assert run(fleet, "member", "delete", str(ann["member_id"]), "--json").json()["worktree"]["status"] == "kept"
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "cafleet", "fleet", "watch", str(fleet.fleet_id), "--json", "--interval", "0.2"],
            env=dict(fleet.environ),
            cwd=fleet.repo,
            stdout=sink,
            stderr=subprocess.DEVNULL,
        )

        def kept() -> list[dict]:
            lines = out.read_text(encoding="utf-8").splitlines()
            whole = lines[:-1] if lines and not lines[-1].endswith("}") else lines
            return [e for e in map(json.loads, whole) if e["event"] == "worktree"]

        try:
            wait_for(kept, timeout=30, what="the watch's event for ann's kept worktree")
            deleted = run(fleet, "member", "delete", str(cid["member_id"]), "--json")
            assert deleted.json()["worktree"]["status"] == "kept", deleted
            wait_for(lambda: len(kept()) >= 2, timeout=30, what="the watch's event for cid's kept worktree")
        finally:
            watch.send_signal(signal.SIGTERM)
            watch.wait(timeout=30)
    events = kept()
    assert [e["member_id"] for e in events] == [ann["member_id"], cid["member_id"]]
    for event, record in zip(events, (ann, cid)):
        tree = record["worktree"]
        assert (
            f"member {record['member_id']}'s worktree {tree['path']} (branch {tree['branch']}) was kept"
            in (event["detail"])
        )
        assert event["command"] == f"cafleet member delete {record['member_id']}"


def test_branch_takes_a_branch_name_not_a_ref_name_nor_at(fleet):
    """`--branch refs/heads/z` means the branch z (never refs/heads/refs/heads/z); `@` (git's
    HEAD), another ref's full name and what git reads as another branch (`@{-1}`) are
    refused in one line, before anything is written."""
    git(fleet.repo, "switch", "--quiet", "-c", "side")
    git(fleet.repo, "switch", "--quiet", "main")  # @{-1} is now side
    made = create(fleet, "zed", "--worktree", "--branch", "refs/heads/z")
    assert made.code == 0, made
    assert made.json()["worktree"]["branch"] == "z"
    assert git(made.json()["worktree"]["path"], "symbolic-ref", "HEAD").strip() == "refs/heads/z"
    assert branches(fleet.repo) == {"main", "side", "z"}
    for bad in ("@", "refs/heads/@", "refs/tags/v1", "refs/remotes/origin/x", "@{-1}", "refs/heads/refs/heads/q"):
        result = create(fleet, "bad", "--worktree", "--branch", bad)
        assert result.code == 2 and result.err.startswith("Error: --branch "), (bad, result)
        assert len(result.err.splitlines()) == 1, (bad, result)
    assert branches(fleet.repo) == {"main", "side", "z"}
    assert fleet.member_count() == 2  # the Director and zed
    refused = create(fleet, "bad", "--worktree", "--branch", "refs/tags/v1")
    assert "give the new branch's name" in refused.err, refused


@pytest.mark.parametrize(
    "point, made, kind",
    [("create.worktree_recorded", False, "unknown_to_git"), ("create.worktree_added", True, "unfinished")],
)
def test_a_creation_killed_around_git_worktree_add_leaves_nothing_unrecorded(fleet, tmp_path, point, made, kind):
    """Killed after the record and before git made the worktree, or after git made it and
    before the pane: the record names it either way, doctor reports it, and one
    ``member delete`` cleans it all up."""
    marker = tmp_path / "paused.txt"
    environ = dict(fleet.environ, CAFLEET_TEST_PAUSE_AT=point, CAFLEET_TEST_PAUSE_FILE=str(marker))
    proc = subprocess.Popen(
        [*LAUNCHER, *create_args(fleet, "ann"), "--coding-agent", "standin", "--worktree"],
        env=environ,
        cwd=fleet.repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: marker.exists() and marker.read_text() == f"paused {point}\n", timeout=30)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    [(member_id, path, branch, status)] = worktree_rows(fleet)
    assert status == "adding" and Path(path).is_dir() is made
    assert (branch in branches(fleet.repo)) is made
    found = run(fleet, "doctor", "--json").json()["worktrees"]["findings"]
    assert [(f["kind"], f["member_id"], f["path"]) for f in found] == [(kind, member_id, path)]
    deleted = run(fleet, "member", "delete", str(member_id), "--json")
    assert deleted.code == 0 and deleted.json()["worktree"]["status"] == "removed", deleted
    assert not Path(path).exists() and branch not in branches(fleet.repo)
    assert "worktrees" not in run(fleet, "doctor", "--json").json()
    assert fleet.member_count() == 1


def test_doctor_finds_unrecorded_and_moved_worktrees_and_watch_reports_a_vanished_one(fleet, tmp_path):
    a = create(fleet, "ann", "--worktree").json()
    root = Path(a["worktree"]["path"]).parent
    stray = root / "by-hand"
    git(fleet.repo, "worktree", "add", "--quiet", "-b", "by-hand", str(stray))
    moved = tmp_path / "moved-ann"
    git(fleet.repo, "worktree", "move", a["worktree"]["path"], str(moved))
    report = run(fleet, "doctor")
    found = {f["kind"]: f for f in run(fleet, "doctor", "--json").json()["worktrees"]["findings"]}
    assert set(found) == {"unknown_to_git", "unrecorded"}
    assert found["unknown_to_git"]["member_id"] == a["member_id"]
    assert "worktree repair" in found["unknown_to_git"]["command"]
    assert found["unrecorded"]["path"] == str(stray)
    assert (
        found["unrecorded"]["command"]
        == f"git -C {fleet.repo} worktree remove {stray} (git refuses while it holds changes)"
    )
    assert f"git no longer knows member {a['member_id']}'s worktree" in report.out
    # fleet watch: one worktree event for the member whose worktree is gone
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cafleet",
                "fleet",
                "watch",
                str(fleet.fleet_id),
                "--json",
                "--interval",
                "0.2",
                "--idle-after",
                "0.2",
            ],
            env=dict(fleet.environ),
            cwd=fleet.repo,
            stdout=sink,
            stderr=subprocess.DEVNULL,
        )

        def events(kind: str = "worktree") -> list[dict]:
            lines = out.read_text(encoding="utf-8").splitlines()
            return [
                e
                for e in map(json.loads, lines[:-1] if lines and not lines[-1].endswith("}") else lines)
                if e["event"] == kind
            ]

        try:
            wait_for(events, timeout=30, what="the watch's worktree event")
            # and a member's own events say where it works
            [silent] = wait_for(lambda: events("silent"), timeout=30, what="the member's silent event")
        finally:
            watch.send_signal(signal.SIGTERM)
            watch.wait(timeout=30)
    [event] = events()
    assert silent["member_id"] == a["member_id"]
    assert silent["worktree"] == {"path": a["worktree"]["path"], "branch": a["worktree"]["branch"], "host": None}
    assert event["member_id"] == a["member_id"]
    assert f"worktree {a['worktree']['path']}" in event["detail"] and "is gone" in event["detail"]


def test_the_webui_member_view_shows_the_worktree_and_its_diff_read_only(fleet):

    from tests.support.web_server import make_app, web_client

    a = create(fleet, "ann", "--worktree").json()
    plain = create(fleet, "bob").json()
    path = Path(a["worktree"]["path"])
    (path / "README").write_text("one\ntwo\nthree\n")
    before = git(path, "status", "--porcelain")
    with web_client(make_app(fleet.db, dict(fleet.environ))) as client:
        shown = client.get(f"/api/members/{a['member_id']}/diff?fleet_id={fleet.fleet_id}").json()
        assert shown["worktree"]["path"] == str(path) and shown["worktree"]["branch"] == a["worktree"]["branch"]
        assert "+three" in shown["diff"] and shown["error"] is None and shown["truncated"] is False
        none = client.get(f"/api/members/{plain['member_id']}/diff").json()
        assert none["worktree"] is None and none["diff"] is None
        assert client.get(f"/api/members/{a['member_id']}/diff?fleet_id={fleet.fleet_id + 1}").status_code == 404
        assert client.post(f"/api/members/{a['member_id']}/diff").status_code in (405, 415)  # never a write
    assert git(path, "status", "--porcelain") == before  # read-only: nothing staged, nothing written


@pytest.fixture
def remote(env, tmp_path, monkeypatch):
    """(fleet, host): a live local fleet, a reachable host (a real sshd on 127.0.0.1, with a
    HOME of its own) and the repository at the same path "there" (the host is this machine)."""
    from tests.support.remote_fleet import fleet_with_hosts, short_directory

    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Test\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n")
    for key, value in {"GIT_CONFIG_GLOBAL": str(gitconfig), "GIT_CONFIG_NOSYSTEM": "1"}.items():
        env[key] = value
        monkeypatch.setenv(key, value)
    with (
        short_directory() as short_dir,
        fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, ["farhost"]) as (pane_fleet, [host]),
    ):
        repo = tmp_path / "repo"
        repo.mkdir()
        git(repo, "init", "--quiet")
        (repo / "README").write_text("one\n")
        git(repo, "add", "README")
        git(repo, "commit", "--quiet", "-m", "first")
        pane_fleet.repo = repo
        yield pane_fleet, host


@pytest.mark.stores("sqlite")
def test_a_worktree_on_another_host_follows_the_same_rules_over_ssh(remote, tmp_path):
    fleet, host = remote
    made = create(fleet, "far", "--worktree", "--host", host.alias)
    assert made.code == 0, made
    record = made.json()
    tree = record["worktree"]
    assert tree["host"] == host.alias
    assert tree["path"].startswith(str(host.remote_home) + "/.local/share/cafleet/worktrees/")  # the host's own folder
    pid = int(host.remote_tmux("display-message", "-p", "-t", record["pane_id"], "#{pane_pid}").strip())
    assert os.readlink(f"/proc/{pid}/cwd") == tree["path"]  # its agent runs in the worktree there
    (Path(tree["path"]) / "far.txt").write_text("far work\n")
    shown = run(fleet, "member", "diff", str(record["member_id"]))
    assert shown.code == 0 and "+far work" in shown.out, shown
    kept = run(fleet, "member", "delete", str(record["member_id"]), "--json")
    assert kept.code == 0 and kept.json()["worktree"]["lost"] == ["1 uncommitted change(s)"], kept
    assert (Path(tree["path"]) / "far.txt").read_text() == "far work\n"
    found = run(fleet, "doctor", "--json").json()["worktrees"]["findings"]
    assert [(f["kind"], f["host"]) for f in found] == [("member_gone", host.alias)]
    gone = run(fleet, "member", "delete", str(record["member_id"]), "--discard-worktree", "--json")
    assert gone.code == 0 and gone.json()["worktree"]["status"] == "removed", gone
    assert not Path(tree["path"]).exists() and tree["branch"] not in branches(fleet.repo)
    # the repository at another path there (--repo), from a Director outside any repository
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    made = create(fleet, "far2", "--worktree", "--host", host.alias, "--repo", str(fleet.repo), cwd=elsewhere)
    assert made.code == 0 and made.json()["worktree"]["base"] == "main", made
    refused = create(fleet, "far3", "--worktree", "--host", host.alias, cwd=elsewhere)
    assert refused.code == 1 and f"{elsewhere} on host {host.alias} is not" in refused.err, refused
