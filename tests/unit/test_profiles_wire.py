"""GET /nbtrain/profiles' wire form of one profile: what a team writes is shown, credentials in it are not."""

from __future__ import annotations

from nbtrain.profiles.model import Profile
from nbtrain.server.profiles import profile_wire


def test_urls_in_a_profiles_text_and_values_lose_their_credentials() -> None:
    profile = Profile(
        name="team", version="1.0", description="see https://wiki.example.com/p?access_token=abcdef1234567890abcd",
        values={"--env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz123456", "MODE": "fast"}},
        locked=frozenset({"--env"}), source="https://bob:hunter2@git.example.com/team/profiles",
        docs="https://docs.example.com/x?sig=AbCdEf1234567890", contact="ml-platform@example.com",
    )
    wire = profile_wire(profile)
    shown = repr(wire)
    for secret in ("abcdef1234567890abcd", "hunter2", "AbCdEf1234567890", "hf_abcdefghijklmnopqrstuvwxyz123456"):
        assert secret not in shown, shown
    assert wire["source"] == "https://git.example.com/team/profiles"
    assert wire["contact"] == "ml-platform@example.com" and "wiki.example.com/p?access_token=***" in wire["description"]
