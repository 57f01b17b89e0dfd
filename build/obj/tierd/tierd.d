build/obj/tierd/tierd.o: tierd/tierd.c tierd/ev.h tierd/sess.h \
 store/tier.h tierd/tierd.h client/kvt_wire.h client/kvtier.h
tierd/ev.h:
tierd/sess.h:
store/tier.h:
tierd/tierd.h:
client/kvt_wire.h:
client/kvtier.h:
