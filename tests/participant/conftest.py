"""Fixtures shared by the participant tests: the analyst's core as a relay (three sites, their
PKI, a store), from the tests of the agreement machine."""

from tests.participant.test_seed_agreement import relay  # noqa: F401 (a fixture)
