// Accessible tabs: arrow keys move between tabs, the panel is labelled by its tab.
import type { ReactNode } from "react";

export function Tabs(props: {
  value: string;
  onChange: (id: string) => void;
  tabs: { id: string; label: string; content: ReactNode }[];
}) {
  const i = props.tabs.findIndex((t) => t.id === props.value);
  const move = (d: number) => {
    const next = props.tabs[(i + d + props.tabs.length) % props.tabs.length];
    props.onChange(next.id);
    document.getElementById(`tab-${next.id}`)?.focus();
  };
  return (
    <div className="tabs">
      <div
        role="tablist"
        aria-label="Views"
        onKeyDown={(e) => (e.key === "ArrowRight" ? move(1) : e.key === "ArrowLeft" ? move(-1) : undefined)}
      >
        {props.tabs.map((t) => (
          <button
            key={t.id}
            id={`tab-${t.id}`}
            role="tab"
            type="button"
            aria-selected={t.id === props.value}
            aria-controls={`panel-${t.id}`}
            tabIndex={t.id === props.value ? 0 : -1}
            onClick={() => props.onChange(t.id)}
          >
            {t.label}
          </button>
        ))}
      </div>
      {props.tabs.map((t) => (
        <div
          key={t.id}
          id={`panel-${t.id}`}
          role="tabpanel"
          aria-labelledby={`tab-${t.id}`}
          hidden={t.id !== props.value}
        >
          {t.id === props.value && t.content}
        </div>
      ))}
    </div>
  );
}
