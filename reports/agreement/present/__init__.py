"""How a stored agreement result is shown: `summary` (the audit in plain words and the small
formatting of figures), `page` (the audit page's sections per criterion), `tables` (the page's
tables of result versions 2 and 3), `charts` (heat-map and bias plot as SVG), `export` (every
table as CSV). Everything reads the typed `AgreementResult`."""
