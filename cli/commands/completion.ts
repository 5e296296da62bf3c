/**
 * `hm completion bash|zsh|fish`: a completion script generated from hm's own command tree
 * (commander has no completion of its own), so it cannot drift from the commands: subcommands
 * and options at every level. Install: `source <(hm completion bash)` in ~/.bashrc;
 * `source <(hm completion zsh)` in ~/.zshrc; `hm completion fish > ~/.config/fish/completions/hm.fish`.
 */
import { Argument, type Command } from "commander";
import { Exit, type Io } from "../io.ts";
import { act } from "../context.ts";

interface Node {
  path: string;
  subcommands: string[];
  options: string[];
}

/** Every command path with its subcommands and options (the root's global options everywhere). */
function commandTree(program: Command): Node[] {
  const globals = program.options.map((o) => o.long).filter((x): x is string => !!x);
  const out: Node[] = [];
  const walk = (cmd: Command, path: string) => {
    const own = cmd === program ? [] : cmd.options.map((o) => o.long).filter((x): x is string => !!x);
    const subs = cmd.commands.filter((c) => !(c as unknown as { _hidden?: boolean })._hidden);
    out.push({ path, subcommands: subs.map((c) => c.name()), options: [...own, ...globals, "--help"] });
    for (const c of subs) walk(c, path ? `${path} ${c.name()}` : c.name());
  };
  walk(program, "");
  return out;
}

const q = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;

function bashScript(nodes: Node[]): string {
  const entries = nodes.map((n) => `  [${q(n.path)}]=${q([...n.subcommands, ...n.options].join(" "))}`).join("\n");
  return `# hm completion for bash: source <(hm completion bash)
declare -gA __hm_words=(
${entries}
)
_hm() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" path="" w i next
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    [[ "$w" == -* ]] && continue
    next="\${path:+$path }$w"
    [[ -n "\${__hm_words[$next]+x}" ]] && path="$next"
  done
  COMPREPLY=($(compgen -W "\${__hm_words[$path]}" -- "$cur"))
}
complete -o default -F _hm hm
`;
}

function zshScript(nodes: Node[]): string {
  return `# hm completion for zsh: source <(hm completion zsh)
autoload -U +X bashcompinit && bashcompinit
${bashScript(nodes).split("\n").slice(1).join("\n")}`;
}

function fishScript(nodes: Node[]): string {
  const paths = nodes
    .filter((n) => n.path)
    .map((n) => q(n.path))
    .join(" ");
  const lines = [
    "# hm completion for fish: hm completion fish > ~/.config/fish/completions/hm.fish",
    `set -g __hm_paths ${paths}`,
    "function __hm_path",
    "  set -l p ''",
    "  for w in (commandline -opc)[2..-1]",
    "    string match -q -- '-*' $w; and continue",
    '    set -l next (string trim -- "$p $w")',
    "    contains -- $next $__hm_paths; and set p $next",
    "  end",
    "  echo $p",
    "end",
    "complete -c hm -f",
  ];
  for (const n of nodes) {
    const cond = `-n ${q(`test (__hm_path) = ${q(n.path)}`)}`;
    if (n.subcommands.length) lines.push(`complete -c hm ${cond} -a ${q(n.subcommands.join(" "))}`);
    for (const o of n.options) lines.push(`complete -c hm ${cond} -l ${o.replace(/^--/, "")}`);
  }
  return `${lines.join("\n")}\n`;
}

export function registerCompletion(program: Command, io: Io) {
  program
    .command("completion")
    .description(
      "print a shell completion script: source <(hm completion bash), or zsh; fish: hm completion fish > ~/.config/fish/completions/hm.fish",
    )
    .addArgument(new Argument("<shell>", "bash, zsh or fish").choices(["bash", "zsh", "fish"]))
    .action(
      act(io, async (_ctx, shell: string) => {
        const nodes = commandTree(program);
        const script =
          shell === "bash"
            ? bashScript(nodes)
            : shell === "zsh"
              ? zshScript(nodes)
              : shell === "fish"
                ? fishScript(nodes)
                : null;
        if (!script) throw new Exit(2, `no completion for ${shell}`);
        io.stdout(script);
      }),
    );
}
