export * from "./handler.ts";
export * from "./client.ts";
export * from "./errors.ts";
export * from "./tools.ts";
export * from "./stops.ts";
export { parseChatRequest, type ChatRequest, type ResponseFormat, type ToolChoice } from "./validate.ts";
