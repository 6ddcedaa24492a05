"""`fleet watch`'s `over-budget` event: once per crossing of a member's budget or the
fleet's (docs/usage.md), judged from the stored totals (no agent's file read). With the
keeper turned off (``CAFLEET_KEEPER=off``), or on but not running at the last round, the
watch does the keeper's part: every round it first reads what is new in the members'
records and stores their totals (:func:`cafleet.delivery.usage.refresh`)."""

from __future__ import annotations

from cafleet.errors import CafleetError

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store


class BudgetWatch:
    def __init__(self, store: Store, environ, fleet_id: int, reads: bool = False) -> None:
        self.store = store
        self.environ = environ
        self.fleet_id = fleet_id
        self.reads = reads  # no keeper runs: this watch keeps the stored totals current
        self.over: dict[int | None, bool] = {}  # member id, or None for the fleet

    def round(self, emit, event) -> None:
        from cafleet.broker import records, usage as budgets

        try:
            if self.reads and records.has_table(self.store, budgets.TABLE):
                from cafleet.delivery import usage

                usage.refresh(self.store, self.fleet_id)
            capped = budgets.capped_members(self.store, self.fleet_id)
            fleet_budget = budgets.fleet_budget(self.store, self.fleet_id)
            if not capped and fleet_budget is None:
                self.over.clear()
                return
            from cafleet.delivery import usage

            report = usage.fleet_usage(self.store, self.environ, self.fleet_id, fresh=False)
        except CafleetError:
            return  # a busy file or a bad price file: try again next round
        found: dict[int | None, str | None] = {}
        for member in report["members"]:
            if member["member_id"] in capped and member["budget"] is not None:
                found[member["member_id"]] = usage.over(member, member["budget"]["usd"], member["budget"]["tokens"])
        if report["budget"] is not None:
            found[None] = usage.over(report, report["budget"]["usd"], report["budget"]["tokens"])
        for key, why in found.items():
            if why and not self.over.get(key):
                what = f"member {key}" if key is not None else f"fleet {self.fleet_id}"
                refused = "sends to it are refused" if key is not None else "sends to its members are refused"
                emit(
                    event(
                        "over-budget",
                        self.fleet_id,
                        member_id=key,
                        detail=f"{what} is over its budget ({why}); {refused}",
                        command=f"cafleet member usage {key}"
                        if key is not None
                        else f"cafleet fleet usage {self.fleet_id}",
                    )
                )
            self.over[key] = bool(why)
        for gone in set(self.over) - set(found):
            del self.over[gone]
