package dev.streamjob.flink.checker.state;

import org.apache.flink.streaming.api.operators.StreamOperatorStateContext;
import org.apache.flink.util.StateMigrationException;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.LinkedHashSet;
import java.util.Set;

/**
 * The reflection the probe needs: proxies that record what an operator asks its state backends
 * for, calls into methods whose signatures differ between Flink 1.20 and 2.3, and naming.
 */
final class Reflect {
    private Reflect() {}

    /** 2.x StreamOperatorStateContext#asyncKeyedStateBackend(), absent in 1.20. */
    static Object asyncBackend(StreamOperatorStateContext ctx) {
        try {
            return StreamOperatorStateContext.class.getMethod("asyncKeyedStateBackend").invoke(ctx);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    static Field findField(Class<?> c, String name) {
        for (; c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f;
            } catch (NoSuchFieldException e) {
                // up
            }
        }
        return null;
    }

    /** A proxy implementing every interface of {@code target}, calls going to {@code handler}. */
    static Object proxy(Object target, InvocationHandler handler) {
        Set<Class<?>> interfaces = new LinkedHashSet<>();
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            collectInterfaces(c, interfaces);
        }
        return Proxy.newProxyInstance(target.getClass().getClassLoader(), interfaces.toArray(new Class<?>[0]), handler);
    }

    static void collectInterfaces(Class<?> c, Set<Class<?>> out) {
        for (Class<?> i : c.getInterfaces()) {
            if (java.lang.reflect.Modifier.isPublic(i.getModifiers()) && out.add(i)) collectInterfaces(i, out);
        }
    }

    static Object invoke(Method m, Object target, Object[] args) throws Throwable {
        try {
            m.setAccessible(true);
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    static Object invokeStatic(Class<?> c, String name, Object[] args) throws Throwable {
        for (Method m : c.getMethods()) {
            if (m.getName().equals(name) && m.getParameterCount() == args.length
                    && java.lang.reflect.Modifier.isStatic(m.getModifiers())) {
                return invoke(m, null, args);
            }
        }
        throw new NoSuchMethodException(c.getName() + "." + name);
    }

    static Object objectMethod(Object proxy, Method m, Object[] args) {
        switch (m.getName()) {
            case "hashCode": return System.identityHashCode(proxy);
            case "equals": return proxy == args[0];
            case "toString": return "probe-proxy";
            default: throw new UnsupportedOperationException(m.getName());
        }
    }

    /** An interface whose methods do nothing (Output, OperatorEventDispatcher, gateways). */
    static Object noOp(Class<?> iface) {
        return Proxy.newProxyInstance(Reflect.class.getClassLoader(), new Class<?>[] {iface}, (proxy, m, args) -> {
            if (m.getDeclaringClass() == Object.class) return objectMethod(proxy, m, args);
            Class<?> r = m.getReturnType();
            if (r == void.class) return null;
            if (r == boolean.class) return false;
            if (r.isPrimitive()) return 0;
            if (r.isInterface()) return noOp(r);
            return null;
        });
    }

    static boolean isA(Class<?> c, String name) {
        for (; c != null; c = c.getSuperclass()) {
            if (c.getName().equals(name)) return true;
            Set<Class<?>> all = new LinkedHashSet<>();
            collectInterfaces(c, all);
            for (Class<?> i : all) if (i.getName().equals(name)) return true;
        }
        return false;
    }

    static boolean hasSimpleName(Class<?> c, String simple) {
        for (; c != null; c = c.getSuperclass()) {
            if (c.getSimpleName().equals(simple)) return true;
            Set<Class<?>> all = new LinkedHashSet<>();
            collectInterfaces(c, all);
            for (Class<?> i : all) if (i.getSimpleName().equals(simple)) return true;
        }
        return false;
    }

    static String simple(Object o) {
        return o == null ? "null" : o.getClass().getSimpleName();
    }

    /** The cause Flink's restore reports: the StateMigrationException if any, else the root cause. */
    static String describe(Throwable e) {
        Throwable pick = null;
        Throwable t = e;
        for (int i = 0; t != null && i < 20; t = t.getCause(), i++) {
            if (t instanceof StateMigrationException) {
                pick = t;
                break;
            }
            pick = t;
        }
        String msg = pick.getMessage() == null ? "" : pick.getMessage().split("\n")[0];
        return (pick.getClass().getSimpleName() + ": " + msg).replaceAll("@[0-9a-f]{4,}", "");
    }
}
