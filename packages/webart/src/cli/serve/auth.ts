// Who may talk to the server: with an API key, any client that sends `Authorization: Bearer <key>`
// (compared in constant time); without one, loopback clients only (and the server binds loopback only).
import { createHash, timingSafeEqual } from "node:crypto";
import { isIP } from "node:net";
import { ApiError } from "@webart/engine";

/** True for names and addresses that only this machine can reach. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost") return true;
  return isLoopbackAddress(h);
}

export function isLoopbackAddress(addr: string | undefined): boolean {
  if (!addr) return false;
  const a = addr.toLowerCase().replace(/^::ffff:/, "");
  if (isIP(a) === 4) return a.startsWith("127.");
  return a === "::1";
}

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

/**
 * A request check: throws a 401 (no or wrong key) or 403 (non-loopback client without a server key).
 * Keys are compared as SHA-256 digests, equal in length whatever was sent, with timingSafeEqual.
 */
export function authChecker(
  apiKey: string | undefined,
): (authorization: string | undefined, remote: string | undefined) => void {
  const want = apiKey ? digest(apiKey) : null;
  return (authorization, remote) => {
    if (!want) {
      if (!isLoopbackAddress(remote))
        throw new ApiError(
          403,
          `this server has no API key and serves loopback clients only (you are ${remote})`,
          null,
          "forbidden",
          "invalid_request_error",
        );
      return;
    }
    const m = /^Bearer (.+)$/i.exec(authorization ?? "");
    if (!m) {
      throw new ApiError(
        401,
        "You didn't provide an API key: send `Authorization: Bearer <key>`.",
        null,
        "invalid_api_key",
        "invalid_request_error",
      );
    }
    if (!timingSafeEqual(digest(m[1].trim()), want)) {
      throw new ApiError(401, "Incorrect API key provided.", null, "invalid_api_key", "invalid_request_error");
    }
  };
}
