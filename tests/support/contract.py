"""The runtime contract: which tests also run on the runtimes after the first (docs/api.md, "What runs on which
runtime"). A whole test is marked with ``@CONTRACT``; one case of a parametrized test with :func:`case`."""

import pytest

CONTRACT = pytest.mark.eppkit_runtime_contract("depends on the runtime")


def case(*values, why: str):
    """One parametrized case that is part of the runtime contract (the others run on the first runtime only)."""
    return pytest.param(*values, marks=pytest.mark.eppkit_runtime_contract(why))


def cases(all_cases, contract_case, *, why: str) -> list:
    """``all_cases`` (tuples, or single values), with ``contract_case`` marked as part of the runtime contract."""
    return [(case(*c, why=why) if isinstance(c, tuple) else case(c, why=why)) if c == contract_case else c
            for c in all_cases]
