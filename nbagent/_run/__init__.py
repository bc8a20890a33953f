"""The run: everything between `Agent`'s entry points and the model, the tools and the store.

Layer 3 of nbagent (see tests/test_architecture.py): it imports the base (messages, tools,
approvals, events, ...), the models, the stores and `display.sanitize`; never `agent` and never an
edge. `Agent` builds a frozen `config.RunConfig` and a `prepare.RunStart`, which makes the run's
starting state from the store, `loop.drive` runs it, and `handle.RunHandle` is a run in a
background task.

| module    | owns                                                                            |
|-----------|---------------------------------------------------------------------------------|
| config    | `RunConfig`: the agent's settings as one run sees them                          |
| sources   | `SourceSet`: the agent's tool sources, listed when a run needs them             |
| state     | `RunState`: the thread as stored, the run's machinery, and how it ended         |
| prepare   | `RunStart` (how a run starts), and its starting `RunState` (bad input fails before a write) |
| plan      | pure decisions: each open call is an error result, a pause, or runs             |
| execute   | running one tool call into a `ToolResultMessage`                                |
| guardset  | `GuardSet` (the agent's guards, the hook asked at four points), asking a guard  |
| guarding  | `RunGuards`: one run's guards (answers held and checked, calls, results)        |
| race      | parallel input guards racing the first model call                               |
| loop      | `drive`: model -> plan -> tools -> model ..., committing each step              |
| handle    | `RunHandle`, `consume`                                                          |
| hooks     | `run_hook`: the one place an edge (tracing) plugs into every run; None: off     |
| fork      | copying a thread up to a step (`Threads.fork`)                                  |
| nested    | what passes between an agent call and its sub-agent's run (`AgentTool`, `ParentCall`) |
| subagent  | `agent_tool`: an agent as a tool (`Agent.as_tool`), its run on a child thread     |
"""
