# Turns a text file into a C++ raw string literal include (the prelude ships inside the binary).
file(READ ${IN} CONTENT)
file(WRITE ${OUT} "R\"DLAMPRELUDE(${CONTENT})DLAMPRELUDE\"")
