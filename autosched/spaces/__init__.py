"""Search spaces beyond the sketch search, over the same transform steps: AutoTVM-style templates
(knobs -> a config -> a State: `template`, `TemplateTask`, the tuners, `apply_history_best`) and
MetaSchedule-style stochastic schedules (sampling instructions -> a trace of steps and decisions:
`stochastic.Schedule`, `trace_search`, `tune_space`)."""
