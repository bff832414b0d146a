"""Basic credentials (runtimekit.webconfig.basic): an unknown user costs as much as the dearest
configured one, so the time of a refusal does not say whether a user exists."""

from __future__ import annotations

import base64

import pytest

from runtimekit.webconfig import basic as basic_module
from runtimekit.webconfig.basic import BasicAuthChecker, bcrypt_cost, hash_password


def _header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("order", ["cheap-first", "dear-first"])
async def test_an_unknown_user_is_checked_against_a_hash_of_the_highest_cost(monkeypatch, order):
    cheap, dear = hash_password(b"a", cost=4), hash_password(b"b", cost=6)
    users = {"cheap": cheap, "dear": dear} if order == "cheap-first" else {"dear": dear, "cheap": cheap}
    checked: list[bytes] = []
    real = basic_module._matches

    def recording(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(basic_module, "_matches", recording)
    checker = BasicAuthChecker()
    assert not await checker.check(_header("nobody", "guess"), users)
    assert [bcrypt_cost(hashed) for hashed in checked] == [6]
    assert await checker.check(_header("cheap", "a"), users)
    assert [bcrypt_cost(hashed) for hashed in checked] == [6, 4]
