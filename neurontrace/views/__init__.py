"""Views: what people look at rather than read. Rendering only; the figures come from
:mod:`neurontrace.analysis`.

- :mod:`.chrome`: the merged framework/runtime/device timeline as Chrome-trace JSON
  (Perfetto UI, chrome://tracing), read back losslessly by
  :mod:`neurontrace.readers.exported`;
- :mod:`.html`: one self-contained HTML report (timeline, op share, gaps, copies);
- :mod:`.names`: long C++ kernel names abbreviated for the terminal.
"""
