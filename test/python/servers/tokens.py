"""A local WLCG token issuer for the tests: its own signing key, tokens minted offline with PyPI `scitokens`.

The xrootd SciTokens plugin (scitokens-cpp) would fetch the issuer's keys over HTTPS from
<issuer>/.well-known/openid-configuration; `seed_key_cache` writes them into the plugin's key cache
($XDG_CACHE_HOME/scitokens/scitokens_cpp.sqllite) instead, so no issuer needs to be reachable.
"""
from __future__ import annotations

import base64
import json
import sqlite3
import time
from pathlib import Path
from typing import Optional

import scitokens
from cryptography.hazmat.primitives.asymmetric import ec

ISSUER = "https://issuer.msunmerged.test"
AUDIENCE = "https://wlcg.cern.ch/jwt/v1/any"  # the WLCG profile's "any storage" audience
KEY_ID = "msunmerged-test"
UNMERGED_SCOPE = "storage.modify:/store/unmerged storage.read:/store/unmerged"  # the recommended job token


def _b64(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()


class TokenIssuer:
    """Mints WLCG-profile tokens signed with its key (ES256)."""

    def __init__(self, issuer: str = ISSUER) -> None:
        self.issuer = issuer
        self.key = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict:
        pub = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "EC", "crv": "P-256", "x": _b64(pub.x), "y": _b64(pub.y), "kid": KEY_ID,
                          "alg": "ES256", "use": "sig"}]}

    def seed_key_cache(self, cache_home: Path) -> None:
        """Put this issuer's keys into scitokens-cpp's cache under `cache_home` (its XDG_CACHE_HOME)."""
        (cache_home / "scitokens").mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(cache_home / "scitokens" / "scitokens_cpp.sqllite")
        try:
            db.execute("CREATE TABLE IF NOT EXISTS keycache (issuer text UNIQUE PRIMARY KEY NOT NULL, "
                       "keys text NOT NULL)")
            later = int(time.time()) + 30 * 86400
            db.execute("INSERT OR REPLACE INTO keycache VALUES (?, ?)",
                       (self.issuer, json.dumps({"jwks": self.jwks(), "expires": later, "next_update": later})))
            db.commit()
        finally:
            db.close()

    def mint(self, scope: str = UNMERGED_SCOPE, lifetime: int = 600,
             key: Optional[ec.EllipticCurvePrivateKey] = None) -> str:
        """A serialized token; a negative `lifetime` gives an expired one, another `key` a forged one."""
        token = scitokens.SciToken(key=key or self.key, key_id=KEY_ID, algorithm="ES256")
        token.update_claims({"scope": scope, "wlcg.ver": "1.0", "aud": AUDIENCE, "sub": "msunmerged-cleanup"})
        return token.serialize(issuer=self.issuer, lifetime=lifetime).decode()
