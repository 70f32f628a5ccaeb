// `webart serve` as a library: start the server in-process (tests, embedding) or from the command line.
export { startServer, ServeConfigError, type ServeOptions, type RunningServer } from "./server.ts";
export { serveCommand, parseServeArgs, SERVE, EMBEDDED_MODEL } from "./cli.ts";
export { TrainGate } from "./gate.ts";
export { NAME_RE } from "./routes.ts";
export { authChecker, isLoopbackAddress, isLoopbackHost } from "./auth.ts";
