"""Views: every renderer. Each takes what :mod:`neurontrace.analyses` computed (the
caller computes it, once) and never recomputes a figure:

- :mod:`.terminal`: what the commands print: tables fitted to the terminal, the words of
  ``report``, the capture summary, JSON;
- :mod:`.results`: the computed results a renderer takes (a report cut to ``top``);
- :mod:`.chrome`: the merged framework/runtime/device timeline as Chrome-trace JSON
  (Perfetto UI, chrome://tracing), read back losslessly by
  :mod:`neurontrace.readers.exported`;
- :mod:`.html`: one self-contained HTML report (timeline, op share, gaps, copies);
- :mod:`.names`: long C++ kernel names abbreviated for the terminal.
"""
