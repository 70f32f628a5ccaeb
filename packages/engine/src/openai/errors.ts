// OpenAI-style error responses: { error: { message, type, param, code } } with the matching HTTP status.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly type = status === 404 ? "not_found_error" : status >= 500 ? "server_error" : "invalid_request_error",
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "ApiError";
  }

  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(400, message, param, code);

export function jsonResponse(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

export function errorResponse(e: unknown): Response {
  if (e instanceof ApiError) return jsonResponse(e.toJSON(), e.status, e.headers);
  const err = new ApiError(500, `internal error: ${e instanceof Error ? e.message : String(e)}`);
  return jsonResponse(err.toJSON(), 500);
}
