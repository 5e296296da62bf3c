// The package ships no types; this is the shape it documents.
declare module "parse-prometheus-text-format" {
  export default function parsePrometheusTextFormat(
    text: string,
  ): { name: string; help: string; type: string; metrics: { value: string; labels?: Record<string, string> }[] }[];
}
