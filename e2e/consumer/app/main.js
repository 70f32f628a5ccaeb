// (d) The page: starts the worker, shows what it answers.
const out = document.getElementById("out");
const worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
worker.onmessage = (e) => {
  out.textContent = JSON.stringify(e.data);
  out.dataset.state = e.data.error ? "error" : "done";
};
worker.onerror = (e) => {
  out.textContent = JSON.stringify({ error: e.message });
  out.dataset.state = "error";
};
