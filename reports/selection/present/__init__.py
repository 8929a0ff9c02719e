"""How a stored selection result is shown: `tables` (the CSV tables and the text of every
figure), `page` (what the page and the PDF render), `charts` (forest and Pareto plots as SVG),
`pdf` (the self-contained PDF). Everything reads the stored result JSON defensively, so a
snapshot of an older result version still renders."""
