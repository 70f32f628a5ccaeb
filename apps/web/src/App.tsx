// The web app's shell. For now: which WebGPU adapter the engine worker got.
import { useEffect, useState } from "react";
import { engine } from "./engine.ts";
import type { AdapterInfo } from "./worker.ts";

export function App() {
  const [adapter, setAdapter] = useState<AdapterInfo>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    engine()
      .adapter()
      .then(setAdapter, (e: Error) => setError(e.message));
  }, []);
  return (
    <main>
      <h1>webart</h1>
      <p>Train LLM agents with reinforcement learning on your own GPU, in this tab.</p>
      <section aria-label="GPU adapter">
        <h2>GPU</h2>
        {error && (
          <p role="alert" className="error">
            {error}
          </p>
        )}
        {!adapter && !error && <p>Looking for a WebGPU adapter…</p>}
        {adapter && (
          <dl data-testid="adapter">
            <dt>Adapter</dt>
            <dd data-testid="adapter-name">
              {adapter.vendor} {adapter.architecture} {adapter.description}
            </dd>
            <dt>Engine runs in</dt>
            <dd data-testid="engine-context">{adapter.context === "worker" ? "a Web Worker" : "the page"}</dd>
            <dt>Features</dt>
            <dd>{adapter.features.join(", ") || "none"}</dd>
            <dt>Max storage binding</dt>
            <dd>{(adapter.maxStorageBufferBindingSize / 2 ** 20).toFixed(0)} MiB</dd>
          </dl>
        )}
      </section>
    </main>
  );
}
