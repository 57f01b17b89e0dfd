build/obj/client/kvt_hash.o: client/kvt_hash.c client/kvtier.h
client/kvtier.h:
