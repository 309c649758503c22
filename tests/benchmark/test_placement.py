"""The CPUs' placement probe (specjax.benchmark.placement): a cache line's round trip between two pinned threads."""

import os

import pytest

from specjax.benchmark import placement
from specjax.kernels import build


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not build.registered(), reason="needs 2 CPUs and the kernels")
def test_the_round_trip_is_a_plausible_number_of_microseconds_and_leaves_the_affinity_alone():
  before = os.sched_getaffinity(0)
  trips = [placement.core_round_trip_us(trips=500) for _ in range(3)]
  assert all(0.005 < t < 1000 for t in trips), trips  # a cache line crosses between cores in ns to a few us
  assert os.sched_getaffinity(0) == before


def test_one_cpu_gives_none(monkeypatch):
  monkeypatch.setattr(placement.os, "sched_getaffinity", lambda pid: {0})
  assert placement.core_round_trip_us() is None


def test_placement_names_the_side_of_the_threshold():
  assert placement.placement(None) == ""
  assert placement.placement(0.12) == "near" and placement.placement(0.42) == "far"
  with pytest.raises(ValueError, match="trips"):
    placement.core_round_trip_us(trips=0)
