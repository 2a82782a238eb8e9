"""ttl: default and per-put expiry (minutes), refresh on read, sweeps, sweeper signatures.

Expiry is tested with sub-second TTLs (``ttl=0.002`` minutes = 120 ms): an expired item is
invisible to get, search and list_namespaces before any sweep runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable

from conformance.store._registry import case
from conformance.store.api import StoreFactory
from conformance.store.fixtures import keys

SHORT = 0.002  # minutes: 120 ms
#: a TTL long enough to outlive a slow round trip, short enough to watch expire
WINDOW = 0.04  # minutes: 2.4 s
STEP = 1.5  # seconds between reads in the refresh cases


@case("ttl")
def expired_items_are_invisible_before_any_sweep(factory: StoreFactory) -> None:
    with factory.open() as api:
        started = time.monotonic()
        api.put(("gone",), "k", {"v": 1}, ttl=SHORT)
        seen = api.get(("gone",), "k", refresh_ttl=False)
        if time.monotonic() - started < SHORT * 60 * 0.8:  # a slow server may be past it
            assert seen is not None, "the item was readable before its expiry"
        api.put(("mixed",), "short", {"v": 1}, ttl=SHORT)
        api.put(("mixed",), "forever", {"v": 2})
        time.sleep(SHORT * 60 + 0.3)
        assert api.get(("gone",), "k") is None
        assert api.get(("mixed",), "short") is None
        assert api.search(("gone",)) == []
        assert keys(api.search(("mixed",))) == ["forever"]
        assert api.list_namespaces() == [("mixed",)]


@case("ttl")
def default_ttl_applies_and_per_put_ttl_overrides_it(factory: StoreFactory) -> None:
    with factory.open(ttl={"default_ttl": SHORT}) as api:
        api.put(("ns",), "default", {"v": 1})
        api.put(("ns",), "longer", {"v": 2}, ttl=10)
        api.put(("ns",), "never", {"v": 3}, ttl=None)
        time.sleep(SHORT * 60 + 0.3)
        assert api.get(("ns",), "default") is None
        assert api.get(("ns",), "longer") is not None
        assert api.get(("ns",), "never") is not None
        assert sorted(keys(api.search(("ns",)))) == ["longer", "never"]


@case("ttl")
def a_put_re_arms_the_ttl(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("ns",), "k", {"v": 1}, ttl=SHORT)
        api.put(("ns",), "k", {"v": 2}, ttl=10)
        time.sleep(SHORT * 60 + 0.3)
        assert api.get(("ns",), "k").value == {"v": 2}
        api.put(("ns",), "k", {"v": 3}, ttl=SHORT)
        time.sleep(SHORT * 60 + 0.3)
        assert api.get(("ns",), "k") is None


def _sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.monotonic()))


def _refresh_then_lapse(put: Callable[[], None], read: Callable[[bool], bool]) -> None:
    """A refreshing read keeps the item past its first expiry; a read with refresh off does not.

    The reads are timed from what was measured, not by fixed sleeps, so a slow server shifts
    them without making a right answer look wrong: the item must be live while the refreshed
    expiry surely holds, and gone once the latest expiry the refresh can have set has passed
    (a read with ``refresh_ttl=False`` that refreshed would keep it live).
    """
    window = WINDOW * 60
    put_started = time.monotonic()
    put()
    _sleep_until(put_started + STEP)
    refresh_started = time.monotonic()
    first = read(True)  # refreshes: the item now expires at refresh_started + window or later
    refresh_ended = time.monotonic()
    if refresh_ended - put_started < window * 0.9:  # a slow server may be past it
        assert first, "the item was not found before its first expiry"
    _sleep_until(put_started + window + 0.3)  # past the first expiry
    second = read(False)
    if first and time.monotonic() < refresh_started + window * 0.9:
        assert second, "a refreshing read did not keep the item past its first expiry"
    _sleep_until(refresh_ended + window + 0.3)  # past the latest expiry the refresh set
    assert not read(False), "the item outlived its refreshed expiry (did a read refresh it?)"


@case("ttl")
def get_refreshes_unless_refresh_ttl_is_false(factory: StoreFactory) -> None:
    with factory.open(ttl={"refresh_on_read": True}) as api:
        _refresh_then_lapse(
            lambda: api.put(("ns",), "k", {"v": 1}, ttl=WINDOW),
            # the first read refreshes by the store's default (refresh_on_read=True)
            lambda refresh: (
                (api.get(("ns",), "k") if refresh else api.get(("ns",), "k", refresh_ttl=False))
                is not None
            ),
        )


@case("ttl")
def search_refreshes_unless_refresh_ttl_is_false(factory: StoreFactory) -> None:
    with factory.open() as api:
        _refresh_then_lapse(
            lambda: api.put(("ns",), "k", {"v": 1}, ttl=WINDOW),
            lambda refresh: keys(api.search(("ns",), refresh_ttl=refresh)) == ["k"],
        )


@case("ttl")
def refresh_ttl_true_overrides_refresh_on_read_false(factory: StoreFactory) -> None:
    with factory.open(ttl={"refresh_on_read": False}) as api:
        started = time.monotonic()
        api.put(("ns",), "plain", {"v": 1}, ttl=WINDOW)
        api.put(("ns",), "forced", {"v": 2}, ttl=WINDOW)
        time.sleep(STEP)
        plain = api.get(("ns",), "plain")  # no refresh by default
        refreshed = time.monotonic()  # the refresh below starts after this
        forced = api.get(("ns",), "forced", refresh_ttl=True)
        if time.monotonic() - started < WINDOW * 60 * 0.9:  # a slow server may be past it
            assert plain is not None and forced is not None
        time.sleep(STEP)
        assert api.get(("ns",), "plain") is None
        # refreshed while live, it outlives its first expiry: read while the refreshed one
        # surely holds (a loaded machine may reach this read later than that)
        if forced is not None and time.monotonic() - refreshed < WINDOW * 60 * 0.9:
            assert api.get(("ns",), "forced") is not None


@case("ttl")
def sweep_ttl_removes_expired_items_and_counts_them(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("ns",), "a", {"v": 1}, ttl=SHORT)
        api.put(("ns", "sub"), "b", {"v": 2}, ttl=SHORT)
        api.put(("ns",), "live", {"v": 3}, ttl=10)
        api.put(("ns",), "forever", {"v": 4})
        time.sleep(SHORT * 60 + 0.3)
        assert api.sweep_ttl() == 2
        assert api.sweep_ttl() == 0
        assert sorted(keys(api.search(("ns",)))) == ["forever", "live"]


@case("ttl")
def ttl_sweeper_starts_and_stops(factory: StoreFactory) -> None:
    with factory.open(ttl={"sweep_interval_minutes": 1}) as api:
        handle = api.start_ttl_sweeper()
        if api.mode == "sync":
            assert isinstance(handle, concurrent.futures.Future)
        else:
            assert isinstance(handle, asyncio.Task)
        assert api.start_ttl_sweeper() is handle, "a second start returns the running sweeper"
        assert api.stop_ttl_sweeper(timeout=5) is True
        assert api.stop_ttl_sweeper(timeout=5) is True, "stopping twice is harmless"
