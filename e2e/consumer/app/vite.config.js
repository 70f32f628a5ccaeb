// The engine loads the embedded model with a dynamic import, so the worker is built as an ES module.
export default { worker: { format: "es" } };
