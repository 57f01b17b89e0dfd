build/obj/client/kvt_client.o: client/kvt_client.c client/kvt_wire.h \
 client/kvtier.h
client/kvt_wire.h:
client/kvtier.h:
