// The one prominent message: WebGPU missing, the device lost, storage full, or another failure, with what to do.
import type { FailureKind } from "../api.ts";

export interface Banner {
  kind: FailureKind | "info";
  text: string;
  stack?: string;
}

const TITLE: Record<Banner["kind"], string> = {
  "webgpu-missing": "WebGPU is not available",
  "device-lost": "GPU device lost",
  "storage-full": "Storage full",
  other: "Something went wrong",
  info: "Note",
};

export function GpuBanner(props: { banner: Banner; onClose: () => void }) {
  const b = props.banner;
  return (
    <div className={`banner ${b.kind}`} role="alert" data-testid={`banner-${b.kind}`}>
      <div>
        <strong>{TITLE[b.kind]}.</strong> {b.text}
        {b.stack && (
          <details>
            <summary>Details</summary>
            <pre>{b.stack}</pre>
          </details>
        )}
      </div>
      <button type="button" onClick={props.onClose} aria-label="Dismiss message">
        ×
      </button>
    </div>
  );
}
