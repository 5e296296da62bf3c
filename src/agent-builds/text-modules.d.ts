/** Text files bundled as strings (wrangler.toml's `[[rules]] type = "Text"`): the agent's systemd unit. */
declare module "*/harbormaster-agent.service" {
  const text: string;
  export default text;
}
